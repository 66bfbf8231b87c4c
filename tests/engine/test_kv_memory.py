"""The batch that fits the memory at hand: literal sizes, and the one line said when it is cut."""

from __future__ import annotations

import re

from specroll.engine import memory
from specroll.engine.memory import fitting_batch_size, kv_bytes_per_slot
from specroll.engine_config import EngineConfig
from specroll.model.loader import read_config
from specroll.rollout import DEFAULT_MODEL, RolloutConfig, run_rollout

SMOLLM2_SHAPE = dict(num_layers=30, num_kv_heads=3, head_dim=64)


class Shape:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int) -> None:
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim


def test_the_cache_of_smollm2s_shape_takes_45_kib_a_position_in_fp32():
    assert kv_bytes_per_slot(Shape(**SMOLLM2_SHAPE), 1, "float32") == 46_080
    assert kv_bytes_per_slot(Shape(**SMOLLM2_SHAPE), 768, "bfloat16") == 46_080 * 768 // 2


def test_the_batch_is_cut_to_half_the_available_memory_and_never_below_one():
    assert fitting_batch_size(256, 1_000, None) == 256  # unknown memory: as asked
    assert fitting_batch_size(256, 1_000, 10**9) == 256
    assert fitting_batch_size(256, 10**7, 10**9) == 50
    assert fitting_batch_size(256, 10**12, 10**9) == 1


def test_a_rollout_short_of_memory_runs_fewer_at_once_says_so_and_gives_the_same_tokens(monkeypatch, capsys):
    config = RolloutConfig(
        num_prompts=2, n=4, max_tokens=24, engine=EngineConfig(max_batch_size=8), threads=1
    )
    full = run_rollout(config)
    per_position = kv_bytes_per_slot(read_config(DEFAULT_MODEL), 1, "float32")
    available = 2 * 3 * per_position * 200  # three slots of 200 positions in its half
    monkeypatch.setattr(memory, "available_bytes", lambda device: available)
    cut = run_rollout(config)
    said = re.search(
        r"8 slots x (\d+) positions needs .* running (\d+) requests at once", capsys.readouterr().err
    )
    positions, running = int(said.group(1)), int(said.group(2))
    assert running == (available // 2) // (per_position * positions) and 1 <= running < 8
    assert [(r.token_ids, r.logprobs) for r in cut.records] == [
        (r.token_ids, r.logprobs) for r in full.records
    ]
