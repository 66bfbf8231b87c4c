"""Servers for the serve tests: `specroll serve` subprocesses on 127.0.0.1 at free ports, started
once for the session: on the bundled model (speculation on, and off for the identity checks), and on
`smollm2` where a test needs a chat template or vLLM's own tokenizer."""

from __future__ import annotations

import pytest
from real_models import require_smollm2

from specroll.serve.child import ServeProcess

SMALL = ["--max-model-len", "160", "--max-batch-size", "48", "--max-tokens", "96"]
API_KEY = "sesame"  # the speculation-off server's


@pytest.fixture(scope="session")
def servers():
    """(speculation on, speculation off): started together, so their loading overlaps."""
    on, off = ServeProcess(SMALL), ServeProcess([*SMALL, "--speculate", "off", "--api-key", API_KEY])
    try:
        yield on.wait_ready(), off.wait_ready()
    finally:
        codes = on.stop(), off.stop()
    assert codes == (0, 0), f"SIGTERM should end each server cleanly, got {codes}"


@pytest.fixture(scope="session")
def server(servers) -> ServeProcess:
    return servers[0]


@pytest.fixture(scope="session")
def plain_server(servers) -> ServeProcess:
    return servers[1]


@pytest.fixture(scope="session")
def chat_server():
    """`smollm2` (it has a chat template), speculation off, a small context."""
    require_smollm2()
    server = ServeProcess(
        ["--model", "smollm2", "--speculate", "off", "--max-model-len", "128", "--max-batch-size", "4"]
        + ["--max-tokens", "16"]
    )
    try:
        yield server.wait_ready()
    finally:
        server.stop()
