"""`specroll serve` as a child process: started on 127.0.0.1 at a free port with its output in a log
file, ready once `/health` answers 200, stopped by SIGTERM. For programs that drive a server of their
own: the serve tests and the serving benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`python -m specroll.cli serve --host 127.0.0.1 --port PORT ARGS`; `log_path` (a temporary file
    if not given) takes its output, so a chatty server never blocks on a full pipe."""

    def __init__(self, args: Sequence[str], log_path: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="specroll-serve-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "wb")
        command = [
            sys.executable,
            "-m",
            "specroll.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [*command, *args], stdout=self._log, stderr=subprocess.STDOUT, env=env
        )

    def wait_ready(self, timeout: float = 120) -> ServeProcess:
        """Return once `/health` answers 200; raise with the log's tail if the server exits or takes
        longer than `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"specroll serve exited with {self.process.returncode}:\n{self.log()}")
            if self._healthy():
                return self
            time.sleep(0.2)
        raise TimeoutError(f"specroll serve did not answer /health within {timeout:.0f} s:\n{self.log()}")

    def log(self, tail: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-tail:].decode(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (-9 where it had to be killed after `timeout` seconds)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self._log.close()
                return -9
        self._log.close()
        return self.process.returncode

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False
