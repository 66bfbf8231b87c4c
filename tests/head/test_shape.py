"""The warm start's default head shape follows the device the head will draft on."""

from __future__ import annotations

from specroll.head.shape import ONE_DRAFT, TREES, HeadShape, chosen_shape, default_shape


def test_a_cpu_gets_the_one_draft_shape_and_a_gpu_the_deep_one():
    assert default_shape("cpu") == ONE_DRAFT == HeadShape(1, 1, 4096)
    assert default_shape("cuda") == TREES == HeadShape(3, 2, 8192)


def test_given_fields_replace_the_devices_own():
    assert chosen_shape("cpu", depth=2) == HeadShape(2, 1, 4096)
    assert chosen_shape("cuda", num_blocks=1, draft_vocab_size=512) == HeadShape(3, 1, 512)
    assert chosen_shape("cpu", 3, 2, 8192) == TREES


def test_the_shape_reads_as_words():
    assert ONE_DRAFT.describe() == "1 deep, 1 block, 4,096-token draft vocabulary"
    assert TREES.describe() == "3 deep, 2 blocks, 8,192-token draft vocabulary"
