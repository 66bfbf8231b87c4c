"""Training a draft head by distillation toward the target (EAGLE's feature + token objective,
unrolled over the draft's depth as EAGLE-3's training-time test does).

Glossary: position j of a `FeatureSequence` has token X[j], the target's hidden state H[j] (its
final one, followed by the layers a fusing head reads) and its next-token distribution p_j (sparse:
`top_ids`, `top_probs`). The head's prediction at depth d,

    G0 = first_feature(H),   Gd[t] = step(G(d-1)[t], embed(X[t+d]))   predicts H[t+d],

is what drafting computes: depth 1 starts from a real hidden state, deeper ones from the head's own.
The loss at depth d is the cross-entropy of the head's distribution q(Gd[t]) under p_{t+d} (the
distillation term: only how close q is to p makes a coupled draft match the target's sample), plus
`feature_weight` times the smooth-L1 distance of Gd[t] to H[t+d] (which keeps deeper inputs near the
features the head was trained on), plus `acceptance_weight` times 1 - the rate at which a draft from q
matches the target's sample under Gumbel-max coupling (`gumbel_rate_closed`, over p's top tokens):
the cross-entropy pulls q toward all of p, the rate toward the tokens that decide a match. Off by
default: on SmolLM2 it kept 0.8 % more tokens a forward in replay, yet the cross-entropy head ran
faster in 9 of 11 paired bench rounds (BENCHMARKS.md). ReSpec's reward weighting scales each
sequence's loss by `1 + reward_weight * reward` (`reward_weighted`), so that responses the policy is
being pushed toward count more.

`overlap` is the metric to watch: sum_v min(p_v, q_v) = 1 - TV(p, q), the most often any coupling
of a draft from q with a sample from p can agree (over the target's top tokens, so a lower bound).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F

from specroll.drafting.coupling_rates import gumbel_rate_closed
from specroll.head.features import FeatureSequence
from specroll.drafting.head_model import DraftHead
from specroll.model.device import fast_bf16


PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class HeadTrainConfig:
    depth: int = 3  # unrolled draft depth
    window: int = 64  # positions per training window (sequences are cut into windows)
    windows_per_batch: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    feature_weight: float = 0.1
    acceptance_weight: float = 0.0  # the loss adds this times (1 - the Gumbel-max match rate)
    acceptance_top: int = 16  # the rate over p's this many most likely tokens (cost: their square)
    reward_weight: float = 0.0  # ReSpec: a sequence's loss is scaled by 1 + reward_weight * reward
    seed: int = 0
    precision: str = "auto"  # matmuls in "bf16" (weights and optimiser stay fp32), "fp32", or "auto":
    # bf16 where the device multiplies it natively (`fast_bf16`)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.acceptance_weight < 0 or self.acceptance_top < 1:
            raise ValueError(
                f"need acceptance_weight >= 0 and acceptance_top >= 1, "
                f"got {self.acceptance_weight} and {self.acceptance_top}"
            )
        if self.depth < 1 or self.window <= self.depth or self.windows_per_batch < 1:
            raise ValueError(
                f"need depth >= 1, window > depth and windows_per_batch >= 1, "
                f"got {self.depth}, {self.window}, {self.windows_per_batch}"
            )


@dataclass
class Batch:
    tokens: torch.Tensor  # (S, W) long
    hidden: torch.Tensor  # (S, W, H)
    top_ids: torch.Tensor  # (S, W, K) long
    top_probs: torch.Tensor  # (S, W, K)
    valid: torch.Tensor  # (S, W) bool: a real position (windows are padded to W)
    weight: torch.Tensor  # (S,) each window's loss weight


@dataclass
class HeadMetrics:
    """The head's loss and its per-depth overlap with the target on one batch."""

    loss: float
    overlap: list[float] = field(default_factory=list)  # per depth: mean sum_v min(p_v, q_v)


def windows(sequences: Sequence[FeatureSequence], window: int, depth: int) -> list[tuple[int, int]]:
    """(sequence index, first position) of windows of `window` positions covering every sequence,
    overlapping by `depth` so that every position is a depth-d target in some window."""
    out = []
    for i, seq in enumerate(sequences):
        for start in range(0, max(seq.num_positions - depth, 1), window - depth):
            out.append((i, start))
    return out


def make_batch(
    sequences: Sequence[FeatureSequence],
    chosen: Sequence[tuple[int, int]],
    window: int,
    weights: Sequence[float] | None = None,
) -> Batch:
    S, K = len(chosen), sequences[0].top_ids.shape[1]
    H = sequences[0].hidden.shape[1]
    tokens = torch.zeros(S, window, dtype=torch.long)
    hidden = torch.zeros(S, window, H)
    top_ids = torch.zeros(S, window, K, dtype=torch.long)
    top_probs = torch.zeros(S, window, K)
    valid = torch.zeros(S, window, dtype=torch.bool)
    for s, (i, start) in enumerate(chosen):
        seq = sequences[i]
        n = min(window, seq.num_positions - start)
        tokens[s, :n] = seq.tokens[start : start + n]
        hidden[s, :n] = seq.hidden[start : start + n]
        top_ids[s, :n] = seq.top_ids[start : start + n]
        top_probs[s, :n] = seq.top_probs[start : start + n]
        valid[s, :n] = True
    weight = torch.tensor([weights[i] for i, _ in chosen] if weights else [1.0] * S)
    return Batch(tokens, hidden, top_ids, top_probs, valid, weight)


class HeadTrainer:
    """Owns a head's optimisation: `step(batch)` is one update; the head's weights change in place."""

    def __init__(self, head: DraftHead, embedding: torch.Tensor, config: HeadTrainConfig) -> None:
        self.head = head
        self.embedding = embedding.detach()  # (V, H) the target's input embeddings, frozen
        self.config = config
        self.optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.target_to_draft = head.target_to_draft()
        self.num_steps = 0
        self.bf16 = config.precision == "bf16" or (
            config.precision == "auto" and fast_bf16(self.embedding.device)
        )

    def step(self, batch: Batch, lr: float | None = None) -> HeadMetrics:
        self.head.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr if lr is None else lr
        with self._autocast():
            loss, overlap = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        self.optimizer.step()
        self.head.eval()
        self.num_steps += 1
        return HeadMetrics(float(loss.detach()), overlap)

    @torch.no_grad()
    def evaluate(self, batch: Batch) -> HeadMetrics:
        """Loss and overlap at full precision, whatever the training's: heads trained either way
        are measured alike."""
        self.head.eval()
        loss, overlap = self.loss(batch)
        return HeadMetrics(float(loss), overlap)

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.embedding.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, list[float]]:
        previous = self.head.first_feature(batch.hidden)
        final = batch.hidden[..., : self.head.config.hidden_size]  # the final hidden states
        total = batch.hidden.new_zeros(())
        overlap = []
        W = batch.tokens.shape[1]
        for d in range(1, self.config.depth + 1):
            # Gd[t] = step(G(d-1)[t], embed(X[t+d])) predicts position t+d, for t in 0..W-d-1
            current = self.head.step(previous[:, : W - d], self.embedding[batch.tokens[:, d:]])
            mask = (batch.valid[:, d:] & batch.valid[:, : W - d]).float() * batch.weight[:, None]
            ce, agree = self._distill(current, batch.top_ids[:, d:], batch.top_probs[:, d:])
            feature = F.smooth_l1_loss(current, final[:, d:], reduction="none").mean(-1)
            denominator = mask.sum().clamp_min(1.0)
            total = total + ((ce + self.config.feature_weight * feature) * mask).sum() / denominator
            overlap.append(float((agree * mask).sum() / denominator))
            previous = current
        return total / self.config.depth, overlap

    def _distill(
        self, feature: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The distillation loss (cross-entropy of q under the sparse p, targets outside the draft
        vocabulary dropped, plus the weighted Gumbel-max mismatch rate), and sum_v min(p_v, q_v) over
        p's top tokens."""
        log_q = torch.log_softmax(self.head.logits(feature).float(), -1)  # (S, W', Vd)
        draft_ids = self.target_to_draft[top_ids]  # (S, W', K)
        present = draft_ids >= 0
        log_q_top = torch.gather(log_q, -1, draft_ids.clamp_min(0)) * present
        loss = -(top_probs * log_q_top).sum(-1)
        q_top = log_q_top.exp() * present
        if self.config.acceptance_weight:
            k = self.config.acceptance_top  # p's most likely tokens (the features keep them in order)
            log_q_k = log_q_top[..., :k].masked_fill(~present[..., :k], float("-inf"))
            q_rest = (1 - q_top[..., :k].sum(-1)).clamp_min(0)
            rate = gumbel_rate_closed(top_probs[..., :k], log_q_k, q_rest)
            loss = loss + self.config.acceptance_weight * (1 - rate)
        return loss, torch.minimum(top_probs, q_top).sum(-1).detach()


def cosine_lr(base: float, progress: float, warmup: float = 0.03) -> float:
    """Linear warm-up over the first `warmup` of training, then cosine decay to 10 %."""
    if progress < warmup:
        return base * max(progress / warmup, 0.01)
    fraction = (progress - warmup) / max(1 - warmup, 1e-9)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(fraction, 1.0))))


def draft_vocabulary(sequences: Sequence[FeatureSequence], size: int, vocab_size: int) -> torch.Tensor:
    """The `size` tokens with the most target probability mass over the sequences' positions (the
    tokens a draft will need), in ascending id."""
    mass = torch.zeros(vocab_size)
    for seq in sequences:
        mass.index_add_(0, seq.top_ids.reshape(-1), seq.top_probs.reshape(-1).float())
        mass.index_add_(0, seq.tokens, torch.ones(seq.num_positions))
    chosen = mass.topk(min(size, vocab_size)).indices
    return chosen.sort().values


def shuffled_windows(
    sequences: Sequence[FeatureSequence], config: HeadTrainConfig, epoch: int
) -> list[tuple[int, int]]:
    spans = windows(sequences, config.window, config.depth)
    random.Random(config.seed * 1_000_003 + epoch).shuffle(spans)
    return spans
