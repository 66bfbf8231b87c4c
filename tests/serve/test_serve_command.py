"""`specroll serve`'s command line: the KV-cache budget (`--kv-memory`, as vLLM's
`--gpu-memory-utilization` and SGLang's `--mem-fraction-static` give one) sizes the slots and the
context and says so; without the `serve` extra the command says what to install."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from specroll.engine.memory import KvMemory, cache_shape
from specroll.serve.child import ServeProcess

GIB = 1 << 30


def test_kv_memory_is_a_size_or_a_share_of_free_memory():
    assert KvMemory.parse("8").budget(None) == 8 * GIB
    assert KvMemory.parse("1.5GiB").budget(None) == int(1.5 * GIB)
    assert KvMemory.parse("512MiB").budget(None) == 512 << 20
    assert KvMemory.parse("0.25").budget(8 * GIB) == 2 * GIB
    assert KvMemory.parse("40%").budget(10 * GIB) == 4 * GIB
    for bad in ("0", "-1", "lots", "150%", "2TB"):
        with pytest.raises(ValueError, match="--kv-memory"):
            KvMemory.parse(bad)
    with pytest.raises(ValueError, match="free memory"):
        KvMemory.parse("0.5").budget(None)


def test_the_cache_takes_the_slots_that_fit_then_shortens_the_context():
    assert cache_shape(1000, 1, max_batch_size=256, positions=100) == (10, 100)
    assert cache_shape(10**9, 1, max_batch_size=256, positions=100) == (256, 100)
    assert cache_shape(60, 1, max_batch_size=256, positions=100) == (1, 60)
    # SmolLM2 in fp32: 45 KiB a position, so 4096 positions a slot take 180 MiB; 8 GiB holds 45 slots
    smollm2 = 2 * 30 * 3 * 64 * 4
    assert smollm2 == 46080 and cache_shape(8 * GIB, smollm2, 256, 4096 + 9) == (45, 4105)


def test_a_served_cache_is_sized_by_kv_memory_and_printed(tmp_path):
    # the bundled model: 2 KiB a position (fp32), a slot of 256 + 9 positions takes 530 KiB
    served = ServeProcess(["--max-model-len", "256", "--kv-memory", "2MiB"], tmp_path / "serve.log")
    try:
        served.wait_ready()
        log = served.log()
    finally:
        assert served.stop() == 0
    assert "KV cache 2 MiB: 3 slots x 265 positions" in log, log
    short = ServeProcess(["--max-model-len", "256", "--kv-memory", "0.25MiB"], tmp_path / "short.log")
    try:
        short.wait_ready()
        with urllib.request.urlopen(short.url + "/v1/models") as response:
            assert json.load(response)["data"][0]["max_model_len"] == 128 - 9
    finally:
        assert short.stop() == 0
    assert "1 slots x 128 positions" in short.log_path.read_text()


def test_without_the_serve_extra_the_error_names_it():
    code = (
        "import sys; sys.modules['uvicorn'] = None; from specroll.cli import main; sys.exit(main(['serve']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "specroll[serve]" in done.stderr and "uvicorn" in done.stderr
    assert "Traceback" not in done.stderr
