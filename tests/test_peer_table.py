"""`benchmarks/peer_table.py` without vLLM: its arguments, its tables and the kept engines' bookkeeping
(with a stand-in child that speaks the vLLM child's protocol)."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specroll.baselines.vllm_peer import VllmEngines, VllmWorkload
from specroll.bench import BenchRow

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


peer_table = _load(ROOT / "benchmarks" / "peer_table.py", "peer_table")
vllm_child = _load(ROOT / "specroll" / "baselines" / "vllm_child.py", "vllm_child")

# answers the first line with a start-up, then each generation with one 3-token sample a prompt
STAND_IN = """#!{python}
import json, sys
sys.stdin.readline()
print(json.dumps({{"startup_seconds": 7.0}}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    outputs = [[[5, 6, 7]] * request["n"] for _ in request["prompts"]]
    print(json.dumps({{"makespan_seconds": 0.5, "outputs": outputs}}), flush=True)
"""


def _row(system: str, tokens_per_second: float, accepted: float | None = None) -> BenchRow:
    return BenchRow(system, 1.0, int(tokens_per_second), tokens_per_second, accepted, startup_seconds=None)


def _measured(name: str, rounds: list[dict[str, float]]):
    workload = next(w for w in peer_table.WORKLOADS if w.name == name)
    return peer_table.Measured(
        workload, [{s: _row(s, tps) for s, tps in one.items()} for one in rounds], load_averages=[1.5, 2.0]
    )


def test_arguments_pick_workloads_in_their_running_order():
    args = peer_table.parse_args(["--only", "b64,rl", "--rounds", "3"])
    assert [w.name for w in args.workloads] == ["rl", "b64"]  # rl leaves b64 its engines
    assert args.rounds == 3 and args.threads == 1
    assert [w.name for w in peer_table.parse_args([]).workloads] == ["b1", "b8", "rl", "b64", "bundled"]
    with pytest.raises(SystemExit):
        peer_table.parse_args(["--only", "b2"])
    with pytest.raises(SystemExit):
        peer_table.parse_args(["--rounds", "0"])


def test_a_workload_takes_its_own_rounds():
    args = peer_table.parse_args(["--rounds", "2", "--rounds-of", "rl=1", "--only", "rl,b8"])
    assert args.rounds_by_workload == {"b8": 2, "rl": 1}
    for wrong in ("rl", "rl=x", "b2=1", "rl=0"):
        with pytest.raises(SystemExit):
            peer_table.parse_args(["--rounds-of", wrong])


def test_workloads_fill_their_batch():
    for workload in peer_table.WORKLOADS:
        given = dict(zip(workload.args[::2], workload.args[1::2]))
        assert int(given["--num-prompts"]) * int(given["--n"]) >= int(given["--max-batch-size"])
    rl = next(w for w in peer_table.WORKLOADS if w.name == "rl")
    assert rl.describe() == "smollm2, 8 x 8, 256 tokens, batch 64"


def test_ratios_are_paired_round_by_round():
    m = _measured(
        "b8",
        [
            {"plain-fast": 50.0, "speculative": 60.0, "vllm": 100.0, "vllm:ngram": 40.0, "vllm:suffix": 50.0},
            {"plain-fast": 60.0, "speculative": 40.0, "vllm": 100.0, "vllm:ngram": 30.0, "vllm:suffix": 40.0},
        ],
    )
    assert m.paired("plain-fast", "vllm") == [0.5, 0.6]
    assert m.best_speculative() == "vllm:suffix"
    goals = peer_table.goals_table([m]).splitlines()[-1]
    assert goals == (
        "| b8 | 0.55x (0.50-0.60) |  | 1.10x (1.00-1.20) (vllm:suffix) | "
        "plain-fast no (>= 1.0x); speculative no (>= 1.2x) |"
    )


def test_the_systems_table_has_one_line_a_system_that_ran():
    m = _measured("b1", [{"plain": 20.0, "vllm": 40.0}])
    lines = peer_table.systems_table([m]).splitlines()
    assert lines[2:] == ["| b1 | plain | 20.0 |  | 0.50x |  |", "| b1 | vllm | 40.0 |  | 1.00x |  |"]
    m.errors["vllm:ngram"] = "vLLM's child ended (exit status 1); its log is above"
    report = peer_table.report([m], threads=1)
    assert "load average 1.50, 2.00" in report and "vllm:ngram failed: vLLM's child ended" in report


def test_kv_cache_holds_a_full_batch_of_the_longest_requests(tmp_path):
    config = {"num_attention_heads": 9, "hidden_size": 576, "num_key_value_heads": 3, "num_hidden_layers": 30}
    (tmp_path / "config.json").write_text(json.dumps(config))
    settings = {"model_dir": str(tmp_path), "dtype": "float32", "max_batch_size": 64, "max_model_len": 100}
    per_token = 2 * 30 * 3 * 64 * 4
    assert vllm_child.kv_cache_bytes(settings) == int(64 * 100 * per_token * 1.5) + (256 << 20)


def test_kept_engines_pay_start_up_once_per_settings(tmp_path):
    python = tmp_path / "python"
    python.write_text(STAND_IN.format(python=sys.executable))
    python.chmod(0o755)
    workload = VllmWorkload(tmp_path, [[1, 2, 3]], 2, 16, 1.0, 0, 1.0, [0], 8, 0)
    engines = VllmEngines()
    try:
        first = engines.run(workload, python=python)
        kept = engines._engines[""]
        shorter = engines.run(replace(workload, max_tokens=8), python=python)
        assert engines._engines[""] is kept  # covered: the same engine
        assert first.output_tokens == shorter.output_tokens == 6 and first.startup_seconds == 7.0
        engines.run(replace(workload, max_batch_size=4), python=python)
        assert engines._engines[""] is not kept and kept._child.poll() is not None  # replaced, ended
        engines.run(workload, "ngram", python=python)
        assert sorted(engines._engines) == ["", "ngram"]
    finally:
        engines.close()
    assert not engines._engines
