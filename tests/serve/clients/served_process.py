"""`specroll serve` as a subprocess on 127.0.0.1 at a free port, for the tests that drive it with real
clients (tests/serve/test_skyrl_client.py, tests/serve/test_areal_protocol.py)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, body: dict | None = None, method: str | None = None, timeout: float = 60.0):
    """(status, parsed JSON body) of one request; a 4xx/5xx is returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method or ("GET" if body is None else "POST"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    return status, (json.loads(raw) if raw else None)


class ServedModel:
    """Starts `python -m specroll.cli serve ARGS` and waits for /health; `stop()` sends SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, startup_s: float = 120.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [sys.executable, "-m", "specroll.cli", "serve", "--host", "127.0.0.1"]
        command += ["--port", str(self.port)]
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(command + args, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_healthy(startup_s)
        except BaseException:
            self.stop()
            raise

    def log(self, tail: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-tail:].decode(errors="replace")

    def _wait_healthy(self, startup_s: float) -> None:
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"specroll serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                if http_json(f"{self.url}/health", timeout=2.0)[0] == 200:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"specroll serve did not answer /health within {startup_s:.0f} s:\n{self.log()}")

    def model_id(self) -> str:
        status, body = http_json(f"{self.url}/v1/models")
        assert status == 200, body
        return body["data"][0]["id"]

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def perturbed_copy(source: Path, dest: Path, scale: float = 1.0, seed: int = 0) -> Path:
    """A copy of a checkpoint directory whose floating-point tensors carry Gaussian noise of `scale`
    times each tensor's standard deviation: other weights, same names, shapes and config."""
    import torch
    from safetensors.torch import load_file, save_file

    dest.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy(path, dest / path.name)
    generator = torch.Generator().manual_seed(seed)
    for path in sorted(source.glob("*.safetensors")):
        tensors = load_file(path)
        noisy = {}
        for name in sorted(tensors):
            t = tensors[name]
            if t.is_floating_point() and t.numel() > 1:
                noise = torch.randn(t.shape, generator=generator, dtype=torch.float32)
                t = (t.float() + scale * t.float().std() * noise).to(t.dtype)
            noisy[name] = t.contiguous()
        save_file(noisy, dest / path.name, metadata={"format": "pt"})
    return dest
