"""`specroll serve` as a subprocess for the serving benchmarks (`serve_throughput.py`, `serve_load.py`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`specroll serve` as a subprocess on 127.0.0.1 at a free port; its output goes to `log`."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "specroll.cli", "serve", "--port", str(self.port), *args]
        self.log = open(log, "w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    def wait_ready(self, timeout: float = 300) -> Server:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: see {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"server not ready in {timeout}s: see {self.log.name}")

    def stop(self) -> int:
        """SIGTERM; the exit code (-9 when it had to be killed)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = -9
        self.log.close()
        return code
