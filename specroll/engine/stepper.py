"""The launch and verify stages of an engine step: a forward is launched (`InFlight`), then verified
(`Stepper.verified`, the one place a step's `VerifyResult` is made), whichever way it ran: a recorded
step (`CapturedStep`: forward, head and verification as one graph, read back as one tensor) or a
forward launched from Python and verified here (`verifier.verify_batch`), a prefill's included.

Launch and verification are apart so that, with recorded steps, the next decode step can be launched
before the current one is read back (`launch_ahead`): its fed token is gathered on the device from the
current step's emitted one, so the host's reading back and committing run while the device computes.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from specroll.drafting.protocol import Draft, TargetFeatures
from specroll.engine.admission import plan_prefill_forwards
from specroll.engine.captured_step import CapturedStep, LaunchedStep
from specroll.engine.request import Request
from specroll.engine.shared_prefill import plan_shared_prefill
from specroll.engine.step import DraftBatch, InFlight
from specroll.engine.verifier import VerifyResult, verify_batch
from specroll.engine.verify_inputs import row_parents
from specroll.engine_config import EngineConfig
from specroll.model.runner import ForwardOutput, ModelRunner, SequenceInput


class Stepper:
    """launch(requests, drafted) -> InFlight; verified(step) -> VerifyResult. With static forwards a
    verification step that fits is one recorded graph; any other forward is launched from Python."""

    def __init__(self, runner: ModelRunner, config: EngineConfig, with_features: bool) -> None:
        self._runner, self._config = runner, config
        self._with_features = with_features  # a feature-reading drafter's: recorded steps keep them
        self._captured = (
            None
            if runner.static is None
            else CapturedStep(runner, config.seed, config.verify, config.sampling_rule)
        )

    @property
    def records_steps(self) -> bool:
        return self._captured is not None

    @property
    def captured(self) -> CapturedStep | None:
        """The recorded verification step (None without static forwards), for the engine's test seam."""
        return self._captured

    def launch(self, requests: list[Request], drafted: DraftBatch) -> InFlight:
        """One verification forward over each request's pending token and its draft."""
        inputs = verify_inputs(requests, drafted.drafts)
        if self._captured is not None and self._captured.fits(inputs, drafted.drafts):
            launched = self._captured.launch(requests, drafted.drafts, inputs, self._with_features)
            return InFlight(requests, drafted, inputs, launched)
        return InFlight(requests, drafted, inputs, self._runner.forward(inputs))

    def launch_ahead(self, current: InFlight, requests: list[Request], drafted: DraftBatch) -> InFlight:
        """The recorded decode step after `current`, launched before `current` is read back: a request
        in `current` is fed its token there from the device, one position further on; one that joined
        since (prefilled) is fed its pending token."""
        in_current = {r.request_id for r in current.requests}
        ahead = [int(r.request_id in in_current) for r in requests]
        inputs = [  # a token fed from the device is packed as 0
            SequenceInput(r.slot, r.num_cached + 1, [0])
            if a
            else SequenceInput(r.slot, r.num_cached, r.pending_tokens())
            for r, a in zip(requests, ahead)
        ]
        launched = self._captured.launch(
            requests,
            drafted.drafts,
            inputs,
            with_features=False,
            fed_from=[r.slot if a else -1 for r, a in zip(requests, ahead)],
            ahead=ahead,
        )
        return InFlight(requests, drafted, inputs, launched)

    def prefill(self, requests: list[Request]) -> tuple[InFlight, int]:
        """One prefill forward, and the context tokens it computed: a context several fresh requests
        share (a group's prompt) is computed once and its K/V copied to the others' slots
        (`engine.shared_prefill`), each verifying that row's logits with its own noise."""
        started = time.perf_counter()
        inputs = [SequenceInput(r.slot, r.num_cached, r.pending_tokens()) for r in requests]
        plan = plan_shared_prefill([i.token_ids for i in inputs], [r.num_cached == 0 for r in requests])
        out = self._runner.forward([inputs[i] for i in plan.computed])
        if plan.copies:
            self._copy_contexts(requests, inputs, plan.copies)
            rows = torch.tensor(plan.row_of, device=out.logits.device)
            out = ForwardOutput(out.logits.index_select(0, rows), out.hidden.index_select(0, rows))
        computed = sum(len(inputs[i].token_ids) for i in plan.computed)
        return InFlight(requests, DraftBatch.nothing(requests, started), inputs, out), computed

    def _copy_contexts(
        self, requests: list[Request], inputs: list[SequenceInput], copies: list[tuple[int, int]]
    ) -> None:
        """Copy each computed context's K/V to the slots that share it: one copy a context length."""
        by_length: dict[int, tuple[list[int], list[int]]] = {}
        for source, target in copies:
            sources, targets = by_length.setdefault(len(inputs[target].token_ids), ([], []))
            sources.append(requests[source].slot)
            targets.append(requests[target].slot)
        for length, (sources, targets) in by_length.items():
            self._runner.cache.move_slots(sources, targets, length)

    def keep_accepted_branches(self, requests: list[Request], accepted_nodes: list[list[int] | None]) -> None:
        """Move the K/V of each tree's accepted branch off the main chain to consecutive positions,
        after the fed token; the positions past it are stale and are overwritten by later forwards."""
        for r, nodes in zip(requests, accepted_nodes):
            if nodes and nodes != list(range(len(nodes))):
                first = r.num_cached + 1
                self._runner.cache.move(
                    r.slot, [first + i for i in nodes], [first + j for j in range(len(nodes))]
                )

    def verified(self, step: InFlight) -> VerifyResult:
        """The step's verification, row b requests[b]'s, with the features of its logit rows where it
        kept them: a recorded step's read back from the device (waiting on it), a forward launched
        from Python's verified here."""
        if isinstance(step.launched, LaunchedStep):
            return self._captured.collect(step.launched)
        config, out = self._config, step.launched
        result = verify_batch(
            step.requests, step.drafted.drafts, out.logits, config.seed, config.verify, config.sampling_rule
        )
        return replace(result, hidden=out.hidden)


def verify_inputs(requests: list[Request], drafts: list[Draft]) -> list[SequenceInput]:
    """Each request's part of a verification forward: its pending token, then its draft."""
    return [
        SequenceInput(
            r.slot,
            r.num_cached,
            [*r.pending_tokens(), *d.token_ids],
            row_parents(d),
            num_logits=1 + d.num_tokens,
        )
        for r, d in zip(requests, drafts)
    ]


def target_features(
    requests: list[Request], inputs: list[SequenceInput], result: VerifyResult
) -> TargetFeatures:
    """The hidden states (B, Tl, H) of the positions a forward committed, for a feature-reading
    drafter: each row's last fed token, then its accepted drafts (in tree order, the accepted branch).
    One gather on the device; nothing is read back."""
    hidden = result.hidden
    rows = [
        [0, *(i + 1 for i in (nodes if nodes is not None else range(n)))]
        for n, nodes in zip(result.num_accepted, result.accepted_nodes)
    ]
    Tl = hidden.shape[1]
    flat = [b * Tl + j for b, kept in enumerate(rows) for j in kept]
    index = torch.tensor(flat, device=hidden.device)
    return TargetFeatures(
        tuple(r.request_id for r in requests),
        hidden.reshape(-1, hidden.shape[-1]).index_select(0, index),
        tuple(len(kept) for kept in rows),
        tuple(r.num_tokens + len(t) for r, t in zip(requests, result.token_ids)),
        tuple((i.token_ids[len(i.token_ids) - i.num_logits], *t) for i, t in zip(inputs, result.token_ids)),
    )


def prefill_groups(requests: list[Request], min_saving: int) -> list[list[Request]]:
    """Requests to prefill, in the forwards `plan_prefill_forwards` cuts them into (prompts here
    range from a few tokens to a few hundred, and a prefill pads every row to its forward's longest)."""
    if not requests:
        return []
    return [
        [requests[i] for i in forward]
        for forward in plan_prefill_forwards([r.num_tokens for r in requests], min_saving)
    ]
