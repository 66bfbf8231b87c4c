"""A whole verification step as one recorded CUDA graph: the static-shape forward, the LM head and
the device part of verification (`verifier.verify_on_device`), so that a step launches one graph and
copies one tensor back, instead of the graph, then the head and some fifty verification kernels, each
launched from Python.

Verification reads per-row inputs too (the request's id and sampling settings, the drafts, the output
position each row's sample fills). Like the forward's, they are packed on the host in the forward's
row layout (row r is cache slot r, `model.static_forward`), copied in one transfer each (integers,
floats) and unpacked inside the graph. A graph is recorded per static shape and per what the host
knows of the batch's sampling (whether some row truncates, whether some row is greedy: each selects
other kernels). Rejection mode with a drafter's probabilities (a (B, K, V) tensor built on the host)
stays on the eager path.

Rows are verified over the bucket's whole width: a row with fewer drafts than the width has padding
drafts that cannot be accepted (`num_drafts` caps acceptance), so its emitted tokens are those of the
eager path, which `verifier.per_request` reads up to the accepted count. On the CPU the step runs
eagerly, the same bits as the eager path under batch-invariant numerics.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

from specroll.drafting.protocol import Draft
from specroll.engine.request import Request
from specroll.engine.verifier import VerifyResult, per_request, unpack, verify_on_device
from specroll.engine.verify_inputs import POSITIONS, pack_inputs, unpack_inputs
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.forward_rows import ORDER


class CapturedStep:
    """verify(requests, drafts, sequences) -> VerifyResult (with the features of its logit rows) for the
    forwards the runner's static path takes (`fits`), replayed from the runner's `Replayer` (one
    memory pool)."""

    def __init__(self, runner: ModelRunner, seed: int, mode: str, rule: str) -> None:
        if runner.static is None:
            raise ValueError("a captured step needs the runner's static forwards (use_static_forwards)")
        self.runner, self.static = runner, runner.static
        self.seed, self.mode, self.rule = seed, mode, rule
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # width -> (ints, floats)

    def fits(self, sequences: Sequence[SequenceInput], drafts: Sequence[Draft]) -> bool:
        return self.static.fits(sequences) and all(d.probs is None for d in drafts)

    @torch.inference_mode()
    def verify(
        self,
        requests: Sequence[Request],
        drafts: Sequence[Draft],
        sequences: Sequence[SequenceInput],
        with_features: bool = True,
    ) -> VerifyResult:
        """with_features: the result carries the hidden states of the logit rows (n, Tl, F), a
        feature-reading drafter's."""
        self.runner.check(sequences)
        shape = self.static.shape_of(sequences)
        forward = self.static.load(sequences, shape)
        ints, floats = (b[: shape.num_rows] for b in self._buffers(shape.width))
        slots = [s.slot for s in sequences]
        host_ints, host_floats, flags = pack_inputs(requests, drafts, slots, shape.num_rows, shape.width)
        ints.copy_(self.static.to_device(host_ints), non_blocking=True)
        floats.copy_(self.static.to_device(host_floats), non_blocking=True)
        key = ("verify", shape, *flags)
        packed, hidden = self.static.replayer.run(
            key, lambda: self._step(forward, ints, floats, shape, *flags)
        )
        order = forward[: len(sequences), ORDER]
        result = per_request(drafts, *unpack(packed.index_select(0, order).cpu()))  # the one copy back
        if not with_features:
            return result
        return replace(
            result, hidden=hidden.index_select(0, order)[:, : max(s.num_logits for s in sequences)]
        )

    def _buffers(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        if width not in self.buffers:
            rows, device = self.runner.cache.num_slots, self.static.device
            self.buffers[width] = (
                torch.zeros(rows, POSITIONS + 2 * width - 1, dtype=torch.long, device=device),
                torch.ones(rows, 2, dtype=torch.float32, device=device),
            )
        return self.buffers[width]

    def _step(
        self, forward, ints, floats, shape, is_truncated: bool, has_greedy: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the graph records: (R, 2T + 1) packed verification results and (R, T, H) features."""
        T = shape.width
        hidden = self.static.features_of(forward, shape)  # (R, T, H)
        logits = self.runner.model.logits(hidden).float()  # (R, T, V)
        inputs = unpack_inputs(ints, floats, T, (is_truncated, has_greedy))
        return verify_on_device(logits, inputs, self.seed, self.mode, self.rule), hidden
