"""metrics.jsonl when a run resumes: the lines of redone steps go, and so does a line a kill cut short."""

from __future__ import annotations

import json

from specroll.train.metrics_log import keep_metrics_before, read_metrics


def test_lines_of_the_steps_to_redo_and_a_torn_last_line_are_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = "".join(json.dumps({"step": s, "reward_mean": s / 10}) + "\n" for s in range(4))
    path.write_text(rows + '{"step": 4, "rew')
    assert keep_metrics_before(path, 2) == 3
    assert read_metrics(path) == [{"step": 0, "reward_mean": 0.0}, {"step": 1, "reward_mean": 0.1}]
    assert keep_metrics_before(path, 2) == 0
    assert keep_metrics_before(tmp_path / "absent.jsonl", 2) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
