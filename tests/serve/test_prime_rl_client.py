"""prime-rl's own rollout client (`renderers.client.generate`, PyPI `renderers` 0.1.12) against
`specroll serve`: a short rollout, the orchestrator's filesystem weight update, the same rollout again;
every record equals, to the bit, what the engine draws in this process for the same prompt, seed and
weights (tokens, log-probabilities, finish reason).

The client runs in its own environment (.venv-prime/, `make prime-client`, scripts/prime_client_env.sh)
as a subprocess (tests/serve/clients/prime_check.py) that writes what it saw as JSON; this test judges it.
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

PRIME_PYTHON = Path(os.environ.get("SPECROLL_PRIME_PYTHON", ROOT / ".venv-prime" / "bin" / "python"))
CHECK = Path(__file__).parent / "clients" / "prime_check.py"
PROMPTS = ["add a7 b5 c9\n", "add x3 y8\n", "add q1 r2 s3 t4\n"]
SEEDS = [11, 12, 13]
MAX_TOKENS = 12
TEMPERATURE = 1.0

pytestmark = pytest.mark.skipif(
    not PRIME_PYTHON.exists(),
    reason=f"prime-rl's client environment is missing ({PRIME_PYTHON}): run `make prime-client`",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from specroll.rollout import DEFAULT_MODEL
    from specroll.tokenizer import load_tokenizer

    tmp = tmp_path_factory.mktemp("prime")
    weights = perturbed_copy(DEFAULT_MODEL, tmp / "step_1")
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    stop_ids = [tokenizer.hf.eos_token_id]
    server = ServedModel(
        ["--max-batch-size", "8", "--max-model-len", "128", "--max-tokens", "64"], tmp / "serve.log"
    )
    try:
        out = tmp / "report.json"
        flags = {"--url": server.url, "--model": server.model_id(), "--prompts": json.dumps(prompts),
                 "--seeds": json.dumps(SEEDS), "--stop-ids": json.dumps(stop_ids), "--out": str(out),
                 "--weights-dir": str(weights), "--max-tokens": str(MAX_TOKENS),
                 "--temperature": str(TEMPERATURE)}  # fmt: skip
        command = [str(PRIME_PYTHON), str(CHECK), *(x for flag in flags.items() for x in flag)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        report = json.loads(out.read_text()) if out.exists() else {"steps": {}, "error": None}
        report.update(returncode=done.returncode, stderr=done.stderr[-3000:], server_log=server.log())
    finally:
        report["server_exit"] = server.stop()
    report["expected"] = {
        "before": in_process(DEFAULT_MODEL, prompts, stop_ids),
        "after": in_process(weights, prompts, stop_ids),
    }
    return report


def in_process(model_dir: Path, prompts: list[list[int]], stop_ids: list[int]) -> list[dict]:
    """The engine in this process, each prompt drawn as the server draws it: sample 0 of its seed."""
    from specroll.engine.factory import build_engine
    from specroll.engine.request import Request, SamplingParams
    from specroll.engine_config import EngineConfig
    from specroll.rollout import RolloutConfig
    from specroll.serve.keys import group_key, noise_key

    config = RolloutConfig(model_dir=model_dir, max_tokens=MAX_TOKENS, engine=EngineConfig(max_batch_size=8))
    engine = build_engine(config.engine_spec(), max(map(len, prompts)))
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE, stop_token_ids=tuple(stop_ids))
    requests = [
        Request(i, group_key(p), 0, tuple(p), params, noise_key=noise_key(seed, 0))
        for i, (p, seed) in enumerate(zip(prompts, SEEDS))
    ]
    for request in requests:
        engine.add_request(request)
    engine.run()
    return [
        {
            "completion_ids": r.output_token_ids,
            "completion_logprobs": r.output_logprobs,
            "finish_reason": r.finish_reason,
        }
        for r in requests
    ]


def _step(report: dict, name: str):
    if name not in report["steps"]:
        pytest.fail(
            f"prime-rl's client stopped before `{name}`: {json.dumps(report['error'], indent=1)}\n"
            f"client stderr:\n{report['stderr']}\nserver log:\n{report['server_log']}",
            pytrace=False,
        )
    return report["steps"][name]


@pytest.mark.parametrize("phase", ["before", "after"])
def test_records_equal_the_in_process_rollout_to_the_bit(run, phase):
    records, expected = _step(run, phase), run["expected"][phase]
    for record, reference in zip(records, expected, strict=True):
        assert record["completion_ids"] == reference["completion_ids"]
        assert record["completion_logprobs"] == reference["completion_logprobs"]
        assert record["finish_reason"] == reference["finish_reason"]


def test_the_weight_update_changes_what_is_drawn(run):
    assert _step(run, "update") == [200, 200, 200]
    before, after = _step(run, "before"), _step(run, "after")
    assert [r["completion_ids"] for r in before] != [r["completion_ids"] for r in after]


def test_client_and_server_end_cleanly(run):
    assert run["error"] is None and run["returncode"] == 0, json.dumps(run["error"], indent=1)
    assert run["server_exit"] == 0, run["server_log"]
