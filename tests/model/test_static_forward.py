"""Static-shape forwards, the path CUDA graphs replay, proven on this CPU where they run eagerly:
the same bits as the dynamic forward under batch-invariant numerics (rounding apart with the fast
ones), padding that writes nothing but the scratch column, and a recorded part that neither
synchronises with the host nor makes a tensor on another device."""

from __future__ import annotations

import pytest
import torch

from specroll.model.buckets import StaticShape, read_bucket, row_bucket, static_shape, width_bucket
from specroll.model.loader import read_config
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.static_forward import pack
from specroll.model.transformer import CausalLM

CAPACITY = 150
PROMPTS = {2: [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 0: [15, 16, 17], 5: [20, 21, 22, 23, 24, 25]}
STEPS = [  # verification-shaped forwards after the prefills: slots out of order, holes, num_logits < T
    [SequenceInput(2, 12, [1, 2, 3, 4, 5], num_logits=5), SequenceInput(0, 3, [6], num_logits=1)],
    [SequenceInput(5, 6, [7, 8, 9], num_logits=2), SequenceInput(2, 17, [4]), SequenceInput(0, 4, [9, 9])],
    [SequenceInput(0, 6, [1, 2, 3, 4, 5, 6, 7, 8, 9], num_logits=9)],
]


def test_row_buckets_follow_small_powers_then_steps_of_sixteen():
    assert [row_bucket(n, 256) for n in (1, 2, 3, 5, 8, 9, 16, 17, 33, 250)] == [
        1,
        2,
        4,
        8,
        8,
        16,
        16,
        32,
        48,
        256,
    ]
    assert row_bucket(20, 20) == 20  # the most rows is a bucket of its own
    with pytest.raises(ValueError, match="rows 0 outside"):
        row_bucket(0, 8)


def test_read_buckets_are_powers_of_two_blocks_up_to_the_cache():
    assert [read_bucket(n, 64, 1033) for n in (1, 256, 257, 513, 1033)] == [256, 256, 512, 1024, 1033]
    with pytest.raises(ValueError, match="read length 1034 outside"):
        read_bucket(1034, 64, 1033)
    assert static_shape([3, 0], [300, 5], 4, StaticShape(16, 9, 1033), 64) == StaticShape(4, 5, 512)


def test_width_buckets_are_one_more_than_powers_of_two():
    assert [width_bucket(w, 9) for w in range(1, 10)] == [1, 2, 3, 5, 5, 9, 9, 9, 9]
    assert width_bucket(6, 7) == 7 and width_bucket(17, 40) == 17
    with pytest.raises(ValueError, match="width 10 outside"):
        width_bucket(10, 9)


def _runners(model_dir, batch_invariant: bool) -> tuple[ModelRunner, ModelRunner]:
    """Two runners of the same checkpoint, the second with static forwards, both prefilled alike."""
    dynamic, static = (
        ModelRunner.from_pretrained(model_dir, 8, CAPACITY, batch_invariant=batch_invariant) for _ in range(2)
    )
    static.use_static_forwards(max_width=9)
    for runner in (dynamic, static):
        runner.forward([SequenceInput(slot, 0, p) for slot, p in PROMPTS.items()])  # 12 > 9: dynamic
    return dynamic, static


def test_static_forwards_give_the_dynamic_forwards_bits(qwen2_dir, one_thread):
    dynamic, static = _runners(qwen2_dir, batch_invariant=True)
    for step in STEPS:
        a, b = dynamic.forward(step), static.forward(step)
        assert a.logits.shape == b.logits.shape
        assert torch.equal(a.logits, b.logits) and torch.equal(a.hidden, b.hidden)
    for layer in range(len(dynamic.cache.keys)):  # and the same cache, the scratch column apart
        columns = slice(0, dynamic.cache.scratch_column)
        assert torch.equal(dynamic.cache.keys[layer][:, :, columns], static.cache.keys[layer][:, :, columns])
        assert torch.equal(
            dynamic.cache.values[layer][:, :, columns], static.cache.values[layer][:, :, columns]
        )


def test_static_forwards_agree_to_rounding_with_the_fast_numerics_trees_included(qwen2_dir):
    dynamic, static = _runners(qwen2_dir, batch_invariant=False)
    tree = SequenceInput(5, 6, [7, 8, 9, 10], parents=[-1, 0, 0, 2], num_logits=4)
    for step in [*STEPS[:2], [tree, SequenceInput(0, 3, [6])]]:
        a, b = dynamic.forward(step), static.forward(step)
        torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=0)


def test_padding_rows_write_nothing_but_the_scratch_column(qwen2_dir, one_thread):
    """Rows 1, 3, 4, 6 and 7 of an 8-row bucket hold no sequence: every cache position outside the
    real rows' new tokens keeps its value."""
    _, static = _runners(qwen2_dir, batch_invariant=True)
    for layer in range(len(static.cache.keys)):
        static.cache.keys[layer].normal_()
    before = [k.clone() for k in static.cache.keys]
    static.forward(
        [SequenceInput(5, 6, [7, 8], num_logits=2), SequenceInput(0, 3, [6]), SequenceInput(2, 12, [1])]
    )
    written = {(5, 6), (5, 7), (0, 3), (2, 12)}
    for layer, (old, new) in enumerate(zip(before, static.cache.keys)):
        changed = (old != new).any(-1).any(1)  # (slots, columns)
        changed[:, static.cache.scratch_column] = False
        assert {tuple(ix) for ix in changed.nonzero().tolist()} == written, layer


def test_the_packed_inputs_put_each_sequence_in_its_slots_row():
    shape = StaticShape(num_rows=4, width=3, read_length=64)
    packed = pack(
        [SequenceInput(3, 10, [7, 8], num_logits=2), SequenceInput(1, 4, [9, 5, 6], [-1, 0, 0])], shape
    )
    assert packed.shape == (4, 4 + 3 + 3 + 9)
    assert packed[3, [0, 1, 2, 4, 5, 6]].tolist() == [10, 2, 2, 7, 8, 0]  # start, new, logits, tokens
    assert packed[1, [0, 1, 2, 4, 5, 6]].tolist() == [4, 3, 1, 9, 5, 6]
    assert packed[1, 7:10].tolist() == [0, 1, 1]  # depths: both children of the root
    assert packed[1, 10:].reshape(3, 3).tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    assert packed[0, :3].tolist() == [0, 0, 0] and packed[2, :3].tolist() == [0, 0, 0]  # padding rows
    assert packed[:2, 3].tolist() == [3, 1]  # the order of the outputs: the sequences' slots


def test_wider_forwards_and_shared_slots_stay_dynamic(qwen2_dir):
    _, static = _runners(qwen2_dir, batch_invariant=False)
    assert static.static.fits([SequenceInput(0, 3, [1] * 9)])
    assert not static.static.fits([SequenceInput(0, 3, [1] * 10)])
    assert not static.static.fits([SequenceInput(0, 3, [1]), SequenceInput(0, 4, [1])])


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_the_recorded_part_never_synchronises_with_the_host(qwen2_dir, batch_invariant, one_thread):
    """What a CUDA graph records (`StaticForwards.features_of`), traced whole by torch.compile, which
    refuses to break the graph at a host read (`.item()`, `.tolist()`, a tensor's truth value)."""
    torch._dynamo.reset()
    _, static = _runners(qwen2_dir, batch_invariant)
    forwards = static.static
    step = STEPS[1]
    shape = forwards.shape_of(step)
    with torch.inference_mode():
        packed = forwards.load(step, shape)
        expected = forwards.features_of(packed, shape)
        traced = torch.compile(forwards.features_of, fullgraph=True, backend="eager")(packed, shape)
    assert torch.equal(traced, expected)


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_the_static_forward_makes_every_tensor_on_the_models_device(qwen2_dir, batch_invariant):
    """On `meta` (shapes only), an op mixing in a tensor made on the CPU raises as a GPU would; the
    host's packed inputs cross once, by copy."""
    with torch.device("meta"):
        model = CausalLM(read_config(qwen2_dir))
    runner = ModelRunner(model, num_slots=4, capacity=64, batch_invariant=batch_invariant)
    runner.use_static_forwards(max_width=5)
    out = runner.forward([SequenceInput(2, 3, [1, 2, 3], num_logits=3), SequenceInput(0, 5, [4])])
    assert out.logits.device.type == "meta" and out.logits.shape == (2, 3, 97)
    tree = SequenceInput(1, 2, [8, 9, 10, 11], parents=[-1, 0, 0, 2], num_logits=4)
    assert runner.forward([tree]).hidden.shape == (1, 4, read_config(qwen2_dir).hidden_size)


def test_a_shape_is_recorded_at_its_second_use_and_replayed_from_its_inputs(qwen2_dir, one_thread):
    """Under graph semantics (a replay reruns the recording's closure), three steps of one shape with
    other inputs each give the dynamic forward's bits: the recorded part reads its inputs from
    buffers that outlive it, never from values of the call that recorded it."""
    from graph_stand_in import ReplayedOnCpu

    dynamic, static = _runners(qwen2_dir, batch_invariant=True)
    static.static.replayer = replayer = ReplayedOnCpu()
    for i in range(3):
        step = [SequenceInput(2, 12 + i, [1 + i, 2]), SequenceInput(0, 3 + 2 * i, [6, 7 + i], num_logits=2)]
        a, b = dynamic.forward(step), static.forward(step)
        assert torch.equal(a.logits, b.logits) and torch.equal(a.hidden, b.hidden), i
    assert (replayer.num_graphs, replayer.num_replays) == (1, 2)  # eager, recorded and replayed, replayed
    assert replayer.recording_seconds > 0


def test_the_rotary_table_a_graph_reads_is_sized_once_and_never_moves(qwen2_dir):
    dynamic, static = _runners(qwen2_dir, batch_invariant=False)
    table = static.model.rotary
    cos = table.cos
    static.forward([SequenceInput(0, CAPACITY - 40, [5] * 40), SequenceInput(1, 100, [6] * 30)])  # dynamic
    assert table.cos is cos  # a dynamic forward's widest read fits too
    with pytest.raises(RuntimeError, match="recorded CUDA graph"):
        table.reserve(cos.shape[0] + 1, cos.device)
