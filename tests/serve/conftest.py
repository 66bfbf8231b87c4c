"""Servers for the serve tests: `specroll serve` subprocesses on 127.0.0.1 at free ports, on the
bundled model, started once for the session (speculation on, and off for the identity checks)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--max-model-len", "160", "--max-batch-size", "48", "--max-tokens", "96"]
API_KEY = "sesame"  # the speculation-off server's


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "specroll.cli", "serve", "--port", str(self.port), *args]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 120) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.process.stdout.read()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("server not ready")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -9


@pytest.fixture(scope="session")
def servers():
    """(speculation on, speculation off): started together, so their loading overlaps."""
    on, off = ServerProcess(*SMALL), ServerProcess(*SMALL, "--speculate", "off", "--api-key", API_KEY)
    try:
        yield on.wait_ready(), off.wait_ready()
    finally:
        codes = on.stop(), off.stop()
    assert codes == (0, 0), f"SIGTERM should end each server cleanly, got {codes}"


@pytest.fixture(scope="session")
def server(servers) -> ServerProcess:
    return servers[0]


@pytest.fixture(scope="session")
def plain_server(servers) -> ServerProcess:
    return servers[1]
