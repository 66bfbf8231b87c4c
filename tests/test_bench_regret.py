"""An adaptive policy's regret in a bench: its paired ratio over the best fixed cap's with the same
drafter; nothing where no fixed cap ran beside it, and plain, vLLM and fixed caps are never judged."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specroll.bench_regret import Regret, describe, regrets


@dataclass
class Row:
    system: str
    paired_vs_plain: float | None


def test_auto_is_judged_against_the_fastest_fixed_cap_with_its_drafter():
    rows = [
        Row("plain", 1.0),
        Row("speculative", 0.87),
        Row("speculative:fixed-1", 0.90),
        Row("speculative:fixed-2", 0.75),
        Row("speculative/suffix-ahead", 0.95),
        Row("speculative:fixed-2/suffix-ahead", 0.83),
        Row("vllm", 0.8),
    ]
    got = regrets(rows)
    assert [(r.system, r.best_fixed) for r in got] == [
        ("speculative", "speculative:fixed-1"),
        ("speculative/suffix-ahead", "speculative:fixed-2/suffix-ahead"),
    ]
    assert got[0].vs_best == pytest.approx(0.87 / 0.90)
    assert got[1].vs_best == pytest.approx(0.95 / 0.83)  # above 1: better than every fixed cap run
    assert describe(got[0]) == "speculative 0.97 of speculative:fixed-1"


def test_nothing_is_judged_without_a_fixed_cap_or_a_paired_ratio():
    assert regrets([Row("plain", 1.0), Row("speculative", 1.1), Row("speculative:bandit", 1.2)]) == []
    assert regrets([Row("speculative", None), Row("speculative:fixed-1", 1.0)]) == []
    assert regrets([Row("speculative:bandit", 1.2), Row("speculative:fixed-3", 1.5)]) == [
        Regret("speculative:bandit", "speculative:fixed-3", pytest.approx(0.8))
    ]


def test_a_draft_head_named_with_its_path_is_judged_against_fixed_caps_with_that_head():
    """`speculative@DIR` systems (a path holds slashes): each against the fixed caps with its own head."""
    rows = [
        Row("speculative@/tmp/h1", 0.96),
        Row("speculative:fixed-1@/tmp/h1", 1.13),
        Row("speculative:fixed-2@/tmp/h2", 1.50),  # another head: not its comparison
    ]
    assert regrets(rows) == [
        Regret("speculative@/tmp/h1", "speculative:fixed-1@/tmp/h1", pytest.approx(0.96 / 1.13))
    ]
