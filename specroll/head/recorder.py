"""Recording the rollout's own hidden states for online head training.

A `HiddenRecorder` listens to what the engine hands a feature-reading drafter after every forward
(`TargetFeatures`): per request, the target's hidden states at the positions the forward committed and
the tokens at them. A request's parts are consecutive positions (each forward starts where the last
one's newest token stands); `take` turns them into `FeatureSequence`s, with the distillation targets
computed through the target's output layer *as it is now*, so it is called after the rollout and
before the policy's weights change.
"""

from __future__ import annotations

import threading

import torch

from specroll.drafting.protocol import TargetFeatures
from specroll.head.features import FeatureSequence, top_targets


class HiddenRecorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[int, list[tuple[torch.Tensor, list[int]]]] = {}
        self._next_position: dict[int, int] = {}

    def __call__(self, features: TargetFeatures) -> None:
        hidden = features.hidden.detach().float().cpu()
        row = 0
        with self._lock:
            for rid, n, length, tokens in zip(
                features.request_ids, features.num_kept, features.context_lengths, features.token_ids
            ):
                first = length - 1 - n
                if self._next_position.get(rid) != first:  # a new request, or a gap: start afresh
                    self._parts[rid] = []
                self._parts[rid].append((hidden[row : row + n], list(tokens[:n])))
                self._next_position[rid] = length - 1
                row += n

    @property
    def num_positions(self) -> int:
        with self._lock:
            return sum(h.shape[0] for parts in self._parts.values() for h, _ in parts)

    @torch.no_grad()
    def take(self, lm_head_weight: torch.Tensor, temperature: float = 1.0) -> dict[int, FeatureSequence]:
        """Every recorded request's sequence (request id -> sequence), and forget them."""
        with self._lock:
            parts, self._parts, self._next_position = self._parts, {}, {}
        weight = lm_head_weight.detach().float().cpu()
        out = {}
        for rid, pieces in parts.items():
            hidden = torch.cat([h for h, _ in pieces])
            if hidden.shape[0] < 2:
                continue
            tokens = torch.tensor([t for _, ts in pieces for t in ts], dtype=torch.long)
            ids, probs = top_targets(hidden[:, : weight.shape[1]] @ weight.T, temperature)
            out[rid] = FeatureSequence(tokens, hidden, ids, probs)
        return out
