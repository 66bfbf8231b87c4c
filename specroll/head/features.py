"""What a draft head learns from: the target's own hidden states and distributions along responses.

A `FeatureSequence` holds, for consecutive positions j of one response (from its prompt's last token
to its last token), the token at j, the target's final hidden state h_j (its logits at j give the
distribution of the token at j+1) and that distribution's `TOP_K` most likely tokens, at the
sampling temperature: the distillation target, kept sparse (a full 49k-token row per position would
cost 200 KB). Both ways in produce it: a teacher-forced forward over recorded responses
(`teacher_forced`, the warm start) and the rollout's own verification forwards (`HiddenRecorder`,
online training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from specroll.drafting.draws import tempered_softmax, top_candidates
from specroll.model.runner import ModelRunner, SequenceInput

TOP_K = 64  # the distillation target's support: SmolLM2 at T=1 on GSM8K keeps most of its mass there


@dataclass
class FeatureSequence:
    tokens: torch.Tensor  # (N,) long: the token at each position
    hidden: torch.Tensor  # (N, F) the target's features at each position: its final hidden state (H
    # columns), then the outputs of the layers the head fuses, if any (`CausalLM.feature_layers`)
    top_ids: torch.Tensor  # (N, K) long: the target's most likely next tokens at each position
    top_probs: torch.Tensor  # (N, K) their probabilities at the sampling temperature

    def __post_init__(self) -> None:
        N = self.tokens.shape[0]
        if not (self.hidden.shape[0] == self.top_ids.shape[0] == self.top_probs.shape[0] == N):
            raise ValueError("a feature sequence's tensors must cover the same positions")

    @property
    def num_positions(self) -> int:
        return int(self.tokens.shape[0])


def top_targets(
    logits: torch.Tensor, temperature: float = 1.0, k: int = TOP_K
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (N, V) -> the k most likely ids (N, k) and their probabilities under softmax(logits / T)
    (`tempered_softmax`: T = 0 is the one-hot on the argmax), most likely first (training reads the
    first few as p's head)."""
    return top_candidates(tempered_softmax(logits, temperature), k)


@torch.inference_mode()
def teacher_forced(
    runner: ModelRunner,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    temperature: float = 1.0,
    max_positions: int = 2048,
    progress: Callable[[int, int], None] | None = None,
) -> list[FeatureSequence]:
    """Each response's feature sequence, from forwards over prompt + response in batches of at most
    `max_positions` padded positions (the cache slots are reused; nothing is generated);
    `progress(done, total)` after each batch."""
    out: list[FeatureSequence] = []
    order = sorted(range(len(prompts)), key=lambda i: -(len(prompts[i]) + len(responses[i])))
    for batch in _batches(order, [len(prompts[i]) + len(responses[i]) for i in order], runner, max_positions):
        out += _forward_batch(runner, [prompts[i] for i in batch], [responses[i] for i in batch], temperature)
        if progress is not None:
            progress(len(out), len(prompts))
    ranked = dict(zip(order, out))
    return [ranked[i] for i in range(len(prompts))]


def _batches(
    order: list[int], lengths: list[int], runner: ModelRunner, max_positions: int
) -> list[list[int]]:
    """Consecutive runs of `order` (longest first), each padded to its first's length within budget."""
    batches: list[list[int]] = []
    longest = 0
    for index, length in zip(order, lengths):
        if length > runner.cache.capacity:
            raise ValueError(
                f"a sequence of {length} tokens exceeds the runner's capacity {runner.cache.capacity}"
            )
        full = not batches or len(batches[-1]) >= runner.cache.num_slots
        if full or (len(batches[-1]) + 1) * longest > max_positions:
            batches.append([index])
            longest = length
        else:
            batches[-1].append(index)
    return batches


def _forward_batch(
    runner: ModelRunner, prompts: list[Sequence[int]], responses: list[Sequence[int]], temperature: float
) -> list[FeatureSequence]:
    inputs = [
        SequenceInput(slot, 0, [*p, *r], num_logits=len(r) + 1)
        for slot, (p, r) in enumerate(zip(prompts, responses))
    ]
    out = runner.forward(inputs)  # logits (B, Tl, V), hidden (B, Tl, H): row b's positions p-1 .. end-1
    sequences = []
    for b, (p, r) in enumerate(zip(prompts, responses)):
        n = len(r) + 1
        ids, probs = top_targets(out.logits[b, :n], temperature)
        tokens = torch.tensor([p[-1], *r], dtype=torch.long)
        sequences.append(
            FeatureSequence(tokens, out.hidden[b, :n].float().cpu().clone(), ids.cpu(), probs.cpu())
        )
    return sequences
