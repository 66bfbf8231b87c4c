"""`bench --project-profile`: beside each engine system's measured makespan, its forwards priced by
another device's profile (`sim.projection`), on the bundled default."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

from specroll.cli import main
from specroll.policies.cost_model import CostModel
from specroll.sim.prediction import scaled

SMALL = ["--num-prompts", "4", "--n", "3", "--max-tokens", "48", "--max-batch-size", "8"]
PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "policy.cost.json"


def _device_profile(tmp_path: Path) -> Path:
    """The bundled policy's profile, as if measured on another device ten times as fast."""
    fast = replace(scaled(CostModel.load(PROFILE), 0.1), device="cuda", source="ten times the CPU's pace")
    path = tmp_path / "fast.cost.json"
    path.write_text(json.dumps(asdict(fast)))
    return path


def test_engine_systems_are_projected_and_hf_generate_is_not(tmp_path, capsys):
    profile = _device_profile(tmp_path)
    systems = ["--systems", "plain,oracle:fixed-4,hf-generate", "--project-profile", str(profile)]
    assert main(["bench", *SMALL, *systems, "--json"]) == 0
    rows = {r["system"]: r for r in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]}
    plain, oracle = rows["plain"], rows["oracle:fixed-4"]
    assert 0 < plain["projected_makespan_seconds"] < plain["makespan_seconds"]
    assert 0 < oracle["projected_makespan_seconds"] < plain["projected_makespan_seconds"]  # fewer forwards
    assert rows["hf-generate"]["projected_makespan_seconds"] is None


def test_the_table_shows_the_column_and_names_the_profile_only_when_asked(tmp_path, capsys):
    profile = _device_profile(tmp_path)
    assert main(["bench", *SMALL, "--systems", "plain", "--project-profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "projected (s)" in out and f"priced by {profile} (cuda: ten times the CPU's pace)" in out
    assert main(["bench", *SMALL, "--systems", "plain"]) == 0
    assert "projected" not in capsys.readouterr().out


def test_plain_projected_by_its_own_profile_is_the_simulators_replay_of_it(capsys):
    """Two paths to one figure: plain's forwards as measured, priced by this machine's profile, and
    the simulator's replay of the same requests under the engine's rules (bench's `simulated`). They
    differ where the simulator's rules differ from what ran (its prefill groups, a chunk read to its
    longest row): 2.0 % when this was written."""
    systems = ["--systems", "plain", "--project-profile", str(PROFILE)]
    assert main(["bench", *SMALL, *systems, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    assert abs(plain["projected_makespan_seconds"] / plain["predicted_makespan_seconds"] - 1) < 0.05
