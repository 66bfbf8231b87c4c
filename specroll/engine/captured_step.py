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

A step is launched and collected apart (`launch`, `collect`), so the host can prepare and launch the
next step while the device runs this one (`Engine.iterate`): `launch` starts the copy of the packed
results into pinned host memory and records an event; `collect` waits on it. The next step's fed token
need not be known on the host: a row may name the row of the previous step whose last emitted token
it feeds (`fed_from`), which the graph gathers from the device buffer the steps write (`emitted`),
the very token the host would have packed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from specroll.drafting.protocol import Draft
from specroll.engine.request import Request
from specroll.engine.verifier import VerifyResult, per_request, unpack, verify_on_device
from specroll.engine.verify_inputs import POSITIONS, pack_inputs, unpack_inputs
from specroll.model.buckets import StaticShape
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.forward_rows import ORDER, TOKENS


@dataclass(frozen=True)
class LaunchedStep:
    """A verification step on its way: its results reach `results` (host memory) once `ready` fires
    (None where the step ran synchronously, on the CPU).

    drafts:   the step's drafts, a request each, in its order.
    results:  (n, 2T + 1) the packed verification results (`verifier.unpack`), a request each.
    hidden:   (n, Tl, F) the features of its logit rows, on the device; None where not asked for.
    """

    drafts: Sequence[Draft]
    results: torch.Tensor
    ready: torch.cuda.Event | None
    hidden: torch.Tensor | None


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
        # each row's last emitted token: every step writes `emitted_next` (a tree's row holds a token of
        # no use: a step after a tree is never fed from here), a step fed from the device reads
        # `emitted`, copied from it as that step is launched, so that running the step again (a
        # graph's warm-up and recording run it before its replay) reads the same tokens
        slots, device = runner.cache.num_slots, self.static.device
        self.emitted = torch.zeros(slots, dtype=torch.long, device=device)
        self.emitted_next = torch.zeros(slots, dtype=torch.long, device=device)

    def fits(self, sequences: Sequence[SequenceInput], drafts: Sequence[Draft]) -> bool:
        return self.static.fits(sequences) and all(d.probs is None for d in drafts)

    def verify(
        self,
        requests: Sequence[Request],
        drafts: Sequence[Draft],
        sequences: Sequence[SequenceInput],
        with_features: bool = True,
    ) -> VerifyResult:
        """with_features: the result carries the hidden states of the logit rows (n, Tl, F), a
        feature-reading drafter's."""
        return self.collect(self.launch(requests, drafts, sequences, with_features))

    @torch.inference_mode()
    def launch(
        self,
        requests: Sequence[Request],
        drafts: Sequence[Draft],
        sequences: Sequence[SequenceInput],
        with_features: bool = True,
        fed_from: Sequence[int] | None = None,
        ahead: Sequence[int] | None = None,
    ) -> LaunchedStep:
        """Start the step; nothing waits on the device. fed_from: for each sequence, the row of the
        previous step whose last emitted token it feeds instead of its packed first token (whose value
        is then ignored), or -1 to feed the packed one; ahead: for each request, the tokens it emits
        in that previous step, not yet committed (its output positions are that much further on)."""
        self.runner.check(sequences)
        shape = self.static.shape_of(sequences)
        forward = self.static.load(sequences, shape)
        ints, floats = (b[: shape.num_rows] for b in self._buffers(shape.width))
        slots = [s.slot for s in sequences]
        host_ints, host_floats, flags = self.pack(requests, drafts, slots, shape, fed_from, ahead)
        ints.copy_(self.static.to_device(host_ints), non_blocking=True)
        floats.copy_(self.static.to_device(host_floats), non_blocking=True)
        if fed_from is not None:
            self.emitted.copy_(self.emitted_next)  # the previous step's, on the device
        key = ("verify", shape, *flags)
        packed, hidden = self.static.replayer.run(
            key, lambda: self._step(forward, ints, floats, shape, *flags)
        )
        order = forward[: len(sequences), ORDER]
        results = packed.index_select(0, order).to("cpu", non_blocking=True)  # the one copy back
        ready = None
        if self.static.device.type == "cuda":  # the copy is under way: pinned memory, asynchronous
            ready = torch.cuda.Event()
            ready.record()
        features = None
        if with_features:
            features = hidden.index_select(0, order)[:, : max(s.num_logits for s in sequences)]
        return LaunchedStep(drafts, results, ready, features)

    def pack(
        self,
        requests: Sequence[Request],
        drafts: Sequence[Draft],
        rows: Sequence[int],
        shape: StaticShape,
        fed_from: Sequence[int] | None = None,
        ahead: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, tuple[bool, bool]]:
        """The step's integers and floats on the host, request i in row rows[i] (`pack_inputs`), the
        integers with a last column: each row's `fed_from` (-1: its packed token is fed); and the
        sampling flags."""
        ints, floats, flags = pack_inputs(requests, drafts, rows, shape.num_rows, shape.width, ahead)
        column = np.full((ints.shape[0], 1), -1, dtype=np.int64)
        if fed_from is not None:
            column[list(rows), 0] = fed_from
        return np.concatenate([ints, column], 1), floats, flags

    def collect(self, step: LaunchedStep) -> VerifyResult:
        """The launched step's results, once the device has copied them back."""
        if step.ready is not None:
            step.ready.synchronize()
        result = per_request(step.drafts, *unpack(step.results))
        return result if step.hidden is None else replace(result, hidden=step.hidden)

    def _buffers(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        if width not in self.buffers:
            rows, device = self.runner.cache.num_slots, self.static.device
            self.buffers[width] = (
                torch.zeros(rows, POSITIONS + 2 * width, dtype=torch.long, device=device),  # + fed_from
                torch.ones(rows, 2, dtype=torch.float32, device=device),
            )
        return self.buffers[width]

    def _step(self, forward, ints, floats, shape, *flags: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """What the graph records: (R, 2T + 1) packed verification results and (R, T, H) features."""
        T = shape.width
        fed_from = ints[:, -1]
        fed = self.emitted.index_select(0, fed_from.clamp(min=0))
        forward[:, TOKENS] = torch.where(fed_from >= 0, fed, forward[:, TOKENS])
        hidden = self.static.features_of(forward, shape)  # (R, T, H)
        logits = self.runner.model.logits(hidden).float()  # (R, T, V)
        inputs = unpack_inputs(ints[:, :-1], floats, T, flags)  # flags: `sampling_flags`
        packed = verify_on_device(logits, inputs, self.seed, self.mode, self.rule)
        last = packed[:, :T].gather(1, packed[:, -1:].long())  # a chain's last emitted token
        self.emitted_next[: shape.num_rows] = last.view(-1).long()
        return packed, hidden
