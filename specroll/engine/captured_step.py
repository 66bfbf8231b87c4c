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

from typing import Sequence

import numpy as np
import torch

from specroll.drafting.protocol import Draft
from specroll.engine.request import Request
from specroll.engine.verifier import (
    VerifyInputs,
    VerifyResult,
    output_positions,
    per_request,
    unpack,
    verify_on_device,
)
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.forward_rows import ORDER
from specroll.sampling import SamplingRows, sampling_flags

# integer columns: request id, drafts, top-k, then each row's output position (T) and draft (T - 1)
REQUEST_ID, NUM_DRAFTS, TOP_K, POSITIONS = 0, 1, 2, 3
TEMPERATURE, TOP_P = 0, 1  # float columns


class CapturedStep:
    """verify(requests, drafts, sequences) -> (VerifyResult, hidden (n, Tl, H) or None) for the
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
    ) -> tuple[VerifyResult, torch.Tensor | None]:
        """with_features: also return the hidden states of the logit rows (a feature-reading drafter's)."""
        self.runner.check(sequences)
        shape = self.static.shape_of(sequences)
        forward = self.static.load(sequences, shape)
        ints, floats = (b[: shape.num_rows] for b in self._buffers(shape.width))
        host_ints, host_floats, flags = pack_verification(
            requests, drafts, sequences, shape.num_rows, shape.width
        )
        ints.copy_(self.static.to_device(host_ints), non_blocking=True)
        floats.copy_(self.static.to_device(host_floats), non_blocking=True)
        key = ("verify", shape, *flags)
        packed, hidden = self.static.replayer.run(
            key, lambda: self._step(forward, ints, floats, shape, *flags)
        )
        order = forward[: len(sequences), ORDER]
        result = per_request(drafts, *unpack(packed.index_select(0, order).cpu()))  # the one copy back
        if not with_features:
            return result, None
        return result, hidden.index_select(0, order)[:, : max(s.num_logits for s in sequences)]

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
        per_row = lambda column: column[:, None].expand(-1, T).reshape(-1)  # noqa: E731  (R * T,)
        rows = SamplingRows(
            per_row(floats[:, TEMPERATURE]),
            per_row(ints[:, TOP_K]),
            per_row(floats[:, TOP_P]),
            is_truncated,
            has_greedy,
        )
        inputs = VerifyInputs(
            rows,
            ints[:, POSITIONS + T :],  # (R, T - 1) drafts
            ints[:, NUM_DRAFTS],
            ints[:, REQUEST_ID : REQUEST_ID + 1],
            ints[:, POSITIONS : POSITIONS + T],
            None,
        )
        return verify_on_device(logits, inputs, self.seed, self.mode, self.rule), hidden


def pack_verification(
    requests: Sequence[Request],
    drafts: Sequence[Draft],
    sequences: Sequence[SequenceInput],
    num_rows: int,
    T: int,
) -> tuple[np.ndarray, np.ndarray, tuple[bool, bool]]:
    """Each request's verification inputs in the row of its slot: integers (R, 3 + 2T - 1), floats
    (R, 2), and what the host knows of the sampling (some row truncated, some row greedy). Rows without
    a request sample at temperature 1 with no filter: their results are never read."""
    ints = np.zeros((num_rows, POSITIONS + 2 * T - 1), dtype=np.int64)
    floats = np.ones((num_rows, 2), dtype=np.float32)
    for r, d, s in zip(requests, drafts, sequences):
        p = r.params
        ints[s.slot, [REQUEST_ID, NUM_DRAFTS, TOP_K]] = r.noise_key, d.num_tokens, p.top_k
        ints[s.slot, POSITIONS : POSITIONS + T] = output_positions(r, d, T)
        ints[s.slot, POSITIONS + T : POSITIONS + T + d.num_tokens] = d.token_ids
        floats[s.slot] = p.temperature, p.top_p
    params = [r.params for r in requests]
    flags = sampling_flags(
        [p.temperature for p in params], [p.top_k for p in params], [p.top_p for p in params]
    )
    return ints, floats, flags
