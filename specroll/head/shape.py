"""The shape a warm start gives a head, by the device it will draft on.

How many tokens a forward can verify at little cost decides the shape. On a CPU, every extra
verified row costs its arithmetic at the batch sizes a rollout mostly runs at, so `auto` drafts one
token a forward there, sometimes two; a head trained one draft deep, with one block and a
4,096-token draft vocabulary, takes several times the training steps of a three-deep head in the
same budget and drafts in less time. In the tail, where one request is left and width is nearly
free, the same head grows trees from its ranked candidates, and `auto` asks for them there. On a GPU
a wider verification costs little more than one token at every batch size (memory-bound forwards),
so the head is trained three deep, for trees. The measurements behind both choices, and the GPU's
not yet made with a trained head, are in BENCHMARKS.md ("The head's loss aims at the match; the warm
start's shape follows the device", "Trees where they pay").
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
