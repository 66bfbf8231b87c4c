"""A rollout reads its target's config.json once (docs/architecture.md): the spec, the engine built
from it and what the rollout reports afterwards (its provenance, its drafter) take that one value."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from specroll.provenance import RolloutProvenance
from specroll.rollout import DEFAULT_MODEL, RolloutConfig, run_rollout


def _count_config_reads(monkeypatch) -> Counter:
    """Reads of each checkpoint's config.json from here on, by directory."""
    reads: Counter = Counter()
    read_text = Path.read_text

    def counted(path: Path, *args, **kwargs) -> str:
        if path.name == "config.json":
            reads[path.parent.resolve()] += 1
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return reads


def test_a_rollout_of_the_bundled_model_reads_its_config_once(monkeypatch):
    config = RolloutConfig(num_prompts=2, n=2, max_tokens=8)  # the bundled policy, speculating
    reads = _count_config_reads(monkeypatch)
    result = run_rollout(config)
    RolloutProvenance.of(config)  # what `specroll rollout` writes beside its records
    assert config.drafter_name == "draft-model"  # as its summary names it
    assert len(result.records) == 4
    assert reads[Path(DEFAULT_MODEL).resolve()] == 1
