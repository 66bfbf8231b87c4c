"""SkyRL's own HTTP rollout client (`RemoteInferenceClient`, PyPI `skyrl`) against `specroll serve`.

The client needs Python 3.12, so it runs in the small environment that `make skyrl-client`
(scripts/skyrl_client_env.sh, part of `make test`) builds in .venv-skyrl/, as a subprocess
(tests/serve/clients/skyrl_check.py) that writes what it saw as JSON; this test judges it. Not skipped:
without the environment it fails and says how to build it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import ROOT, ServedModel, http_json, perturbed_copy  # noqa: E402

SKYRL_PYTHON = Path(os.environ.get("SPECROLL_SKYRL_PYTHON", ROOT / ".venv-skyrl" / "bin" / "python"))
CHECK = Path(__file__).parent / "clients" / "skyrl_check.py"
PROMPTS = ["add a7 b5 c9\n", "add x3 y8\n"]
MAX_TOKENS = 12
LONG_TOKENS = 64


@pytest.fixture(scope="module")
def skyrl_python() -> Path:
    if not SKYRL_PYTHON.exists():
        pytest.fail(
            f"SkyRL's client environment is missing ({SKYRL_PYTHON}): run `make skyrl-client` "
            "(scripts/skyrl_client_env.sh; `make test` runs it first)",
            pytrace=False,
        )
    return SKYRL_PYTHON


@pytest.fixture(scope="module")
def report(skyrl_python, tmp_path_factory) -> dict:
    from specroll.rollout import DEFAULT_MODEL
    from specroll.tokenizer import load_tokenizer

    tmp = tmp_path_factory.mktemp("skyrl")
    weights = perturbed_copy(DEFAULT_MODEL, tmp / "perturbed")
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    limits = ["--max-batch-size", "8", "--max-model-len", "256", "--max-tokens", "128"]
    server = ServedModel(limits, tmp / "serve.log")
    try:
        out = tmp / "report.json"
        flags = {
            "--url": server.url,
            "--model": server.model_id(),
            "--prompts": json.dumps(prompts),
            "--text": PROMPTS[0],
            "--weights-dir": str(weights),
            "--max-tokens": str(MAX_TOKENS),
            "--long-tokens": str(LONG_TOKENS),
            "--out": str(out),
        }
        command = [str(skyrl_python), str(CHECK), *(x for flag in flags.items() for x in flag)]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120)
        result = json.loads(out.read_text()) if out.exists() else {"steps": {}, "error": None}
        result.update(
            returncode=run.returncode,
            stderr=run.stderr[-3000:],
            prompts=prompts,
            expected_tokenize=tokenizer.hf.encode(PROMPTS[0]),
            server_log=server.log(),
            health_after=http_json(f"{server.url}/health", timeout=10)[0],
        )
    finally:
        result_exit = server.stop()
    result["server_exit"] = result_exit
    return result


def _step(report: dict, name: str):
    steps = report["steps"]
    if name not in steps:
        pytest.fail(
            f"the SkyRL client stopped before `{name}`: {json.dumps(report.get('error'), indent=1)}\n"
            f"client stderr:\n{report['stderr']}\nserver log:\n{report['server_log']}",
            pytrace=False,
        )
    return steps[name]


def _finite_logprobs(output: dict) -> None:
    assert output["response_logprobs"] is not None, "logprobs were asked for and not returned"
    for ids, logprobs in zip(output["response_ids"], output["response_logprobs"]):
        assert len(logprobs) == len(ids)
        assert all(isinstance(x, float) and math.isfinite(x) and x <= 0.0 for x in logprobs), logprobs


def test_generate_returns_tokens_logprobs_and_text(report):
    assert _step(report, "world_size") == [1, 1]
    out = _step(report, "generate")
    assert len(out["response_ids"]) == len(PROMPTS)
    for ids, reason, text in zip(out["response_ids"], out["stop_reasons"], out["responses"]):
        assert 1 <= len(ids) <= MAX_TOKENS and all(isinstance(t, int) for t in ids)
        assert reason in ("stop", "length")
        assert reason == "stop" or len(ids) == MAX_TOKENS
        assert isinstance(text, str) and text  # from /detokenize
    _finite_logprobs(out)
    assert _step(report, "generate_no_logprobs")["response_logprobs"] is None
    assert _step(report, "tokenize") == [report["expected_tokenize"]]


def test_same_seed_same_tokens_and_logprobs(report):
    first, again = _step(report, "generate"), _step(report, "generate_again")
    assert again["response_ids"] == first["response_ids"]
    assert again["response_logprobs"] == first["response_logprobs"]
    assert _step(report, "generate_no_logprobs")["response_ids"] == first["response_ids"]


def test_pause_keep_freezes_and_resumes_unchanged(report):
    assert _step(report, "paused_request_finished_early") is False, "a request sent while paused finished"
    kept, reference = _step(report, "kept"), _step(report, "uninterrupted")
    assert kept["response_ids"] == reference["response_ids"]
    assert kept["response_logprobs"] == reference["response_logprobs"]
    assert kept["stop_reasons"] == reference["stop_reasons"] and kept["stop_reasons"][0] != "abort"
    waited = _step(report, "sent_while_paused")
    assert waited["response_ids"][0] == _step(report, "generate")["response_ids"][0]


def test_pause_abort_returns_partial_tokens(report):
    aborted, reference = _step(report, "aborted"), _step(report, "abort_reference")
    ids, full = aborted["response_ids"][0], reference["response_ids"][0]
    if aborted["stop_reasons"][0] == "abort":
        assert ids == full[: len(ids)], "an aborted choice's tokens are a prefix of the uninterrupted run"
    else:  # it finished before the pause reached it
        assert ids == full


def test_sleep_wake_up_and_reset_prefix_cache(report):
    for name in ("sleep", "wake_weights", "wake_kv_cache", "reset_prefix_cache"):
        (answer,) = _step(report, name).values()
        assert answer["status"] == 200, (name, answer)
    assert _step(report, "generate_after_wake")["response_ids"] == _step(report, "generate")["response_ids"]


def test_weight_update_from_a_safetensors_directory(report):
    (answer,) = _step(report, "update_weights").values()
    assert answer["status"] == 200, answer
    before, after = _step(report, "weight_info_before"), _step(report, "weight_info_after")
    assert before["status"] == after["status"] == 200
    assert after["body"]["weight_version"] != before["body"]["weight_version"]
    assert after["body"]["weights_sha256"] != before["body"]["weights_sha256"]
    old, new = _step(report, "generate"), _step(report, "generate_after_update")
    _finite_logprobs(new)
    assert new["response_ids"] != old["response_ids"], "the same seed drew the same tokens under new weights"
    assert new["response_logprobs"] != old["response_logprobs"]


def test_tinker_sample_and_openai_passthrough(report):
    sequences = _step(report, "sample")["sequences"]
    assert len(sequences) == 2
    for seq in sequences:
        assert seq["tokens"] and seq["stop_reason"] in ("stop", "length")
        assert all(math.isfinite(x) for x in seq["logprobs"])
    completion = _step(report, "completion")
    assert completion["choices"][0]["finish_reason"] in ("stop", "length")


def test_transfers_that_need_a_gpu_are_refused_clearly(report):
    for name, outcome in _step(report, "refusals").items():
        assert "accepted" not in outcome, (name, outcome)
        assert 400 <= outcome["status"] < 500, (name, outcome)


def test_server_stays_healthy_and_exits_cleanly(report):
    assert report["error"] is None, json.dumps(report["error"], indent=1)
    assert report["returncode"] == 0, report["stderr"]
    assert report["health_after"] == 200
    assert report["server_exit"] == 0, report["server_log"]
