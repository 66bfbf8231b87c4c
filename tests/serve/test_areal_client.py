"""AReaL 1.0's own remote inference engine (`RemotevLLMEngine`, PyPI `areal` 1.0.4) against `specroll serve`:
a short rollout, pause, a weight update from disk, continue, the rollout again, the client-side pause and
resume, offload and onload, the rollout a third time.

AReaL sends no seed, so the server draws one a request; what is checked to the bit is every token's
log-probability: each equals the engine's own score of that token (a forward in this process over the
prompt and the tokens before it, `specroll.serve.scoring.Scorer`) under the weights AReaL's record names.

The client runs in its own environment (.venv-areal/, `make areal-client`, scripts/areal_client_env.sh) as a
subprocess (tests/serve/clients/areal_check.py) that writes what it saw as JSON; this test judges it.
Without that environment it is skipped, saying how to build it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import ROOT, ServedModel, perturbed_copy  # noqa: E402

AREAL_PYTHON = Path(os.environ.get("SPECROLL_AREAL_PYTHON", ROOT / ".venv-areal" / "bin" / "python"))
CHECK = Path(__file__).parent / "clients" / "areal_check.py"
PROMPTS = ["add a7 b5 c9\n", "add x3 y8\n"]
MAX_TOKENS = 12

pytestmark = pytest.mark.skipif(
    not AREAL_PYTHON.exists(),
    reason=f"AReaL's client environment is missing ({AREAL_PYTHON}): run `make areal-client`",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from specroll.rollout import DEFAULT_MODEL
    from specroll.tokenizer import load_tokenizer

    tmp = tmp_path_factory.mktemp("areal")
    weights = perturbed_copy(DEFAULT_MODEL, tmp / "step_1")
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    server = ServedModel(
        ["--max-batch-size", "8", "--max-model-len", "128", "--max-tokens", "64"], tmp / "serve.log"
    )
    try:
        out = tmp / "report.json"
        flags = {"--addr": server.url.removeprefix("http://"), "--prompts": json.dumps(prompts),
                 "--stop-ids": json.dumps([tokenizer.hf.eos_token_id]), "--weights-dir": str(weights),
                 "--name-root": str(tmp / "name_resolve"), "--max-tokens": str(MAX_TOKENS),
                 "--out": str(out)}  # fmt: skip
        command = [str(AREAL_PYTHON), str(CHECK), *(x for flag in flags.items() for x in flag)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        report = json.loads(out.read_text()) if out.exists() else {"steps": {}, "error": None}
        report.update(returncode=done.returncode, stderr=done.stderr[-3000:], server_log=server.log())
    finally:
        report["server_exit"] = server.stop()
    report["weights"] = {0: DEFAULT_MODEL, 1: weights}
    return report


def scored(model_dir: Path, record: dict) -> list[float]:
    """The engine's log-probability of each output token given the prompt and the tokens before it."""
    from specroll.engine.factory import build_engine
    from specroll.engine_config import EngineConfig
    from specroll.rollout import RolloutConfig
    from specroll.serve.scoring import Scorer

    tokens = record["input_tokens"] + record["output_tokens"]
    config = RolloutConfig(model_dir=model_dir, max_tokens=len(tokens), engine=EngineConfig(max_batch_size=1))
    engine = build_engine(config.engine_spec(), len(tokens))
    rows = Scorer(engine).score(tokens, len(record["input_tokens"]), 1.0, 0)
    return [row.logprob for row in rows]


def _step(report: dict, name: str):
    if name not in report["steps"]:
        pytest.fail(
            f"AReaL's client stopped before `{name}`:\n{report['error']}\n"
            f"client stderr:\n{report['stderr']}\nserver log:\n{report['server_log']}",
            pytrace=False,
        )
    return report["steps"][name]


@pytest.mark.parametrize("step, version", [("before", 0), ("after", 1), ("resumed", 1)])
def test_every_logprob_is_the_engines_own_to_the_bit(run, step, version):
    for record in _step(run, step):
        assert len(record["output_tokens"]) == MAX_TOKENS or record["stop_reason"] == "stop", record
        assert record["output_versions"] == [version] * len(record["output_tokens"])
        assert record["output_logprobs"] == scored(run["weights"][version], record)


def test_the_update_from_disk_moved_the_weights(run):
    assert _step(run, "version") == 1
    record = _step(run, "after")[0]
    assert record["output_logprobs"] != scored(run["weights"][0], record)


def test_the_workflow_pause_is_the_clients_own(run):
    assert _step(run, "paused") is True


def test_client_and_server_end_cleanly(run):
    assert run["error"] is None and run["returncode"] == 0, f"{run['error']}\n{run['stderr']}"
    assert run["server_exit"] == 0, run["server_log"]
