"""verl 0.9.1's own rollout classes on specroll's verl backend (`specroll.integrations.verl`): verl's
`LLMServerManager` starts the replica its registry resolves for `rollout.name=specroll`, its
`LLMServerClient` (the agent loop's client) draws a rollout through its load balancer, its trainer-side
adapter pushes a weight update, and a directory update restores the start weights. Every record equals,
to the bit, what the engine draws in this process for the same prompt, seed and weights. verl's
partial-rollout client's resend of an aborted request continues it; LoRA adapter weights and sampling
fields specroll lacks are refused by name.

verl runs in its own environment (.venv-verl/, `make verl-env`, scripts/verl_env.sh) as a subprocess
(tests/integrations/clients/verl_check.py, on a local Ray of two CPUs) that writes what it saw as JSON;
this test judges it. Without that environment it is skipped, saying how to build it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "serve" / "clients"))
from served_process import perturbed_copy  # noqa: E402

VERL_PYTHON = Path(os.environ.get("SPECROLL_VERL_PYTHON", ROOT / ".venv-verl" / "bin" / "python"))
CHECK = Path(__file__).parent / "clients" / "verl_check.py"
PROMPTS = ["add a7 b5 c9\n", "add x3 y8\n", "add q1 r2 s3 t4\n"]
SEEDS = [21, 22, 23]
MAX_TOKENS = 12
TEMPERATURE = 1.0
ENGINE_SEED = 42  # verl's default rollout.seed

pytestmark = pytest.mark.skipif(
    not VERL_PYTHON.exists(), reason=f"verl's environment is missing ({VERL_PYTHON}): run `make verl-env`"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from specroll.rollout import DEFAULT_MODEL
    from specroll.tokenizer import load_tokenizer

    tmp = tmp_path_factory.mktemp("verl")
    weights = perturbed_copy(DEFAULT_MODEL, tmp / "step_1")
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    out = tmp / "report.json"
    flags = {"--model": str(DEFAULT_MODEL), "--weights-dir": str(weights), "--prompts": json.dumps(prompts),
             "--seeds": json.dumps(SEEDS), "--max-tokens": str(MAX_TOKENS),
             "--temperature": str(TEMPERATURE), "--engine-seed": str(ENGINE_SEED),
             "--out": str(out)}  # fmt: skip
    command = [str(VERL_PYTHON), str(CHECK), *(x for flag in flags.items() for x in flag)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp, env=env)
    report = json.loads(out.read_text()) if out.exists() else {"steps": {}, "error": None}
    report.update(returncode=done.returncode, output=(done.stdout + done.stderr)[-4000:])
    report["expected"] = {
        "start": in_process(DEFAULT_MODEL, prompts, SEEDS),
        "perturbed": in_process(weights, prompts, SEEDS),
    }
    attempts = report["steps"].get("partial", {}).get("attempts")
    if attempts:  # the restored start weights drew it, under the seed the server drew
        report["expected"]["partial"] = in_process(DEFAULT_MODEL, prompts[:1], [attempts[0]["seed"]])[0]
    return report


def in_process(model_dir: Path, prompts: list[list[int]], seeds: list[int]) -> list[dict]:
    """The engine in this process, each prompt drawn as the server draws it: sample 0 of its seed."""
    from specroll.engine.factory import build_engine
    from specroll.engine.request import Request, SamplingParams
    from specroll.engine_config import EngineConfig
    from specroll.rollout import RolloutConfig
    from specroll.serve.keys import group_key, noise_key

    engine = EngineConfig(max_batch_size=8, dtype="float32", seed=ENGINE_SEED)
    config = RolloutConfig(model_dir=model_dir, max_tokens=MAX_TOKENS, engine=engine)
    built = build_engine(config.engine_spec(), max(map(len, prompts)))
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE)
    requests = [
        Request(i, group_key(p), 0, tuple(p), params, noise_key=noise_key(seed, 0))
        for i, (p, seed) in enumerate(zip(prompts, seeds))
    ]
    for request in requests:
        built.add_request(request)
    built.run()
    return [{"token_ids": r.output_token_ids, "log_probs": r.output_logprobs} for r in requests]


def _step(report: dict, name: str):
    if name not in report["steps"]:
        pytest.fail(
            f"verl's rollout stopped before `{name}`:\n{report['error']}\noutput:\n{report['output']}",
            pytrace=False,
        )
    return report["steps"][name]


@pytest.mark.parametrize(
    "step, weights", [("before", "start"), ("after", "perturbed"), ("restored", "start")]
)
def test_records_equal_the_in_process_rollout_to_the_bit(run, step, weights):
    records, expected = _step(run, step), run["expected"][weights]
    for record, reference in zip(records, expected, strict=True):
        assert record["token_ids"] == reference["token_ids"]
        assert record["log_probs"] == reference["log_probs"]
        assert record["stop_reason"] == "completed"


def test_verl_resolves_the_specroll_replica_through_its_registry(run):
    assert _step(run, "replica") == "SpecrollReplica"


def test_weight_updates_move_the_version_and_the_trainer_step(run):
    before, after, restored = (_step(run, name) for name in ("before", "after", "restored"))
    assert [r["token_ids"] for r in before] != [r["token_ids"] for r in after]
    assert {r["weight_version"] for r in before} == {0}
    assert {(r["weight_version"], r["global_steps"]) for r in after} == {(1, 1)}
    assert _step(run, "directory_update") == 2
    assert {(r["weight_version"], r["global_steps"]) for r in restored} == {(2, 2)}


def test_lora_adapter_weights_are_refused_naming_the_alternative(run):
    assert "lora.merge=True" in _step(run, "lora_refused")


def test_a_sampling_field_specroll_lacks_is_refused_by_name(run):
    assert "sampling_params.repetition_penalty" in _step(run, "refused")


def test_a_resent_aborted_request_continues_under_the_seed_that_drew_it(run):
    partial = _step(run, "partial")
    first, resent = partial["attempts"]
    assert partial["aborted"] == 1 and first["stop_reason"] == "aborted" and first["token_ids"] == []
    assert resent["seed"] == first["seed"]
    expected = run["expected"]["partial"]
    assert partial["final"]["token_ids"] == expected["token_ids"]
    assert partial["final"]["log_probs"] == expected["log_probs"]


def test_verl_ends_cleanly(run):
    assert run["error"] is None and run["returncode"] == 0, f"{run['error']}\n{run['output']}"
