"""The shape a warm start gives a head, by the device it will draft on.

How many tokens a forward can verify at little cost decides the shape. On a CPU, every extra
verified row costs its arithmetic (BENCHMARKS.md, "Where a verification's width goes on this
CPU"): width 2 costs 1.13x width 1 at batch 8, width 3 1.30x. So `auto` drafts one token a forward,
sometimes two. A head trained one draft deep, with one block and a 4,096-token draft vocabulary, takes
5x the steps of the three-deep head in the same budget and drafts in less time. In `bench` at batch 8
it gave 1.16-1.21x plain (medians over 8 to 13 rounds), against 1.09-1.14x for the three-deep
head.
On a GPU a wider verification costs little more than one token (memory-bound forwards), so trees of
drafts pay there, and the head is trained three deep for them. That default is reasoned, not measured:
no GPU run has compared the two shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class HeadShape:
    depth: int  # draft depth the training unrolls
    num_blocks: int  # residual blocks after the fusion
    draft_vocab_size: int  # tokens the head can propose

    def describe(self) -> str:
        blocks = "block" if self.num_blocks == 1 else "blocks"
        vocabulary = f"{self.draft_vocab_size:,}-token draft vocabulary"
        return f"{self.depth} deep, {self.num_blocks} {blocks}, {vocabulary}"


ONE_DRAFT = HeadShape(depth=1, num_blocks=1, draft_vocab_size=4096)  # where width costs its arithmetic
TREES = HeadShape(depth=3, num_blocks=2, draft_vocab_size=8192)  # where width is nearly free


def default_shape(device: str) -> HeadShape:
    """The shape for a head that will draft on `device` ("cpu" or "cuda", as resolved)."""
    return ONE_DRAFT if device == "cpu" else TREES


def chosen_shape(
    device: str, depth: int | None = None, num_blocks: int | None = None, draft_vocab_size: int | None = None
) -> HeadShape:
    """The device's shape, with any of its fields that were given in its place."""
    given = {"depth": depth, "num_blocks": num_blocks, "draft_vocab_size": draft_vocab_size}
    return replace(default_shape(device), **{name: v for name, v in given.items() if v is not None})
