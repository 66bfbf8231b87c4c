"""`specroll serve` as a subprocess on 127.0.0.1 at a free port, for the tests that drive it with real
clients (tests/serve/test_skyrl_client.py, tests/serve/test_areal_protocol.py)."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from specroll.serve.child import ServeProcess

ROOT = Path(__file__).resolve().parents[3]
SMALL_SERVER = "--max-batch-size 8 --max-model-len 256 --max-tokens 160".split()  # the protocol tests'


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


class ServedModel(ServeProcess):
    """`specroll serve ARGS`, ready (`/health`) when constructed; `stop()` sends SIGTERM."""

    def __init__(self, args: list[str], log_path: Path, startup_s: float = 120.0) -> None:
        super().__init__(args, log_path)
        try:
            self.wait_ready(startup_s)
        except BaseException:
            self.stop()
            raise

    def model_id(self) -> str:
        status, body = http_json(f"{self.url}/v1/models")
        assert status == 200, body
        return body["data"][0]["id"]


def module_server(tmp_path_factory, name: str, args: list[str]):
    """A module fixture's body: `specroll serve ARGS`, logging under a temporary `name` folder, stopped
    (and checked to exit 0) when the module's tests are done."""
    served = ServedModel(args, tmp_path_factory.mktemp(name) / "serve.log")
    yield served
    assert served.stop() == 0, served.log()


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
