"""`auto`: per-request draft lengths that maximise the batch's expected tokens per second.

Imports no torch. Each request's per-token acceptance alpha_i comes from its own live acceptance
(`AcceptanceTracker`, shrunk toward the batch's while it has few samples). A forward emits
E_i(k_i) = (1 - alpha_i^(k_i+1)) / (1 - alpha_i) tokens for request i, and the cost model predicts
the forward's seconds; `auto` picks the k_i in 0..min(max_draft, num_remaining - 1) maximising
sum_i E_i(k_i) / seconds.

Every row of a forward is as wide as the widest draft, and a draft model drafts all rows for as many
rounds as the longest draft, so the forward's time depends only on the cap c = max_i k_i. For a fixed c
each E_i grows with k_i, so k_i = min(c, limit_i) is optimal, and the search is over c alone (c = 0,
plain decoding, included: large batches with low acceptance fall back to it).

Trees: where the drafter drafts them (`BatchView.trees`), `auto` weighs beside the chains a tree of n
nodes for every request, n in `tree_budgets`: it emits 1 + A(n) tokens a request, A(n) the accepted
draft tokens measured for trees of n nodes (`TreeAcceptance`), and costs a forward n + 1 wide plus
as many drafting steps as the tree is deep. Whichever of no draft, the best chain cap and the best
tree has the highest expected tokens a second runs; so where width is cheap (one request, a forward
that reads the weights once) trees win, and where width costs its arithmetic (a full batch on a CPU)
chains or nothing do, forward by forward as the batch shrinks.

A batch that drains (nothing waits for a slot: the rollout's tail) is done when its last request is,
so there tokens count by the pace of the request that would finish last (`draining_tokens`), not by
their sum: a freed slot stays empty, and a draft that speeds the requests it suits while the one
with furthest to go accepts little buys no time. Which request finishes last is known only in
expectation, so the pace is averaged over samples of the requests' remaining lengths, drawn from
the lengths its own prompt's requests reached where there are enough, else from those of the
requests the engine finished recently (`remaining_lengths`). Acceptance varies widely
between the requests of one batch (BENCHMARKS.md, "Trees where they pay"), so a full batch without a
queue drafts only where the requests likely to finish last gain. Trees are weighed with the batch's
acceptance for every request, so their rate is the same either way.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from specroll.policies.acceptance_estimates import AcceptanceTracker
from specroll.policies.calibration import ForwardTimeCalibration
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.policies.draft_coverage import DraftCoverage
from specroll.policies.exploration import Probe, is_worth_probing, seconds_left
from specroll.policies.plain_hold import PlainHold
from specroll.policies.remaining_lengths import sample_remaining
from specroll.policies.speculation_math import expected_tokens
from specroll.policies.tree_acceptance import TreeAcceptance


DRAIN_SAMPLES = 32  # samples of a draining batch's remaining lengths a forward weighs
DEAR_TREE = 1.5  # a tree forward costing more than this many plain ones waits for the chains' warm-up
TREE_DRAFT_STEPS = 4  # drafting steps a tree takes (its depth: `drafting.draft_tree.TreeShape`'s)


@dataclass(frozen=True)
class Plan:
    """One forward's drafts as `auto` chose them, and the expected tokens a second it predicted."""

    lengths: list[int]  # per request: chain tokens, or tree nodes
    tree: bool
    rate: float

    @property
    def cap(self) -> int:
        return max(self.lengths, default=0)


@dataclass(frozen=True)
class Options:
    """One forward's plans as `auto` priced them: every chain cap's rate, and a tree per budget."""

    limits: list[int]  # per request: its longest useful draft (`BatchView.draft_limits`)
    chain_rates: list[float]  # by cap, from 0 (plain decoding) to max(limits)
    trees: list[Plan]

    def chain(self, cap: int) -> Plan:
        """Every request drafting min(cap, its limit)."""
        cap = min(cap, len(self.chain_rates) - 1)
        return Plan([min(cap, k) for k in self.limits], False, self.chain_rates[cap])

    @property
    def best_chain(self) -> Plan:
        """The chain with the highest rate; ties go to the shorter cap."""
        caps = range(len(self.chain_rates))
        return self.chain(max(caps, key=lambda cap: (self.chain_rates[cap], -cap)))

    @property
    def best(self) -> Plan:
        """The best chain or tree; ties go to the chain (listed first)."""
        return max([self.best_chain, *self.trees], key=lambda p: p.rate)

    @property
    def best_draft_rate(self) -> float:
        """The best rate of a chain that drafts: what measuring acceptance may find worth running."""
        return max(self.chain_rates[1:], default=0.0)


def chain_rates(
    model: CostModel,
    alphas: Sequence[float],
    limits: Sequence[int],
    context_length: float = 0.0,
    time_scale: Callable[[int], float] = lambda cap: 1.0,
    remaining: np.ndarray | Sequence[int] | None = None,
    coverage: float = 1.0,
) -> list[float]:
    """The expected tokens a second of every common cap c in 0..max(limits), request i drafting
    min(c, limits[i]). time_scale(c) corrects the model's forward time for cap c
    (`ForwardTimeCalibration`). With `remaining` (each request's tokens still to come, for a batch
    that drains), the rate is `draining_tokens`'s: the pace of the request that would finish last.
    `coverage`: the share of asked draft tokens the drafter proposes (`DraftCoverage`); a request
    asked for k emits 1 + coverage * (E(alpha, k) - 1)."""
    limit = np.asarray(limits, dtype=np.int64)
    top = int(limit.max(initial=0))
    # emitted[i, k]: expected tokens of request i asked for k
    drafted = expected_tokens(np.asarray(alphas, dtype=np.float64)[:, None], np.arange(top + 1)[None])
    emitted = 1.0 + coverage * (drafted - 1.0)
    # every cap at once: lengths[c, i] = min(c, limits[i]); a forward is as wide as its longest draft
    lengths = np.minimum(np.arange(top + 1)[:, None], limit[None, :])
    widths = lengths.max(axis=1, initial=0).tolist()
    priced = {w: model.step_seconds(len(limit), w, context_length) * time_scale(w) for w in set(widths)}
    seconds = np.array([priced[w] for w in widths])
    tokens = np.take_along_axis(emitted, lengths.T, axis=1).T  # (caps, B)
    if remaining is None:
        return list(tokens.sum(axis=1) / seconds)
    return list(draining_tokens_by_cap(tokens, remaining) / seconds)


def best_chain(model: CostModel, alphas: Sequence[float], limits: Sequence[int], **options) -> Plan:
    """The best common cap c, request i drafting min(c, limits[i]), and the rate it predicts; `options`
    are `chain_rates`'s. Ties go to the shorter cap."""
    return Options(list(limits), chain_rates(model, alphas, limits, **options), []).best_chain


def draining_tokens(emitted: np.ndarray, remaining: np.ndarray | Sequence[int]) -> float:
    """A forward's tokens as a batch that drains counts them: B times the progress of the request
    that would finish last, measured in forwards a plain decode would take. Request i, emitting
    emitted[i] a forward with remaining[i] tokens to go, finishes after remaining[i] / emitted[i]
    forwards; a freed slot stays empty, so the batch takes as long as the longest of them, and a plain
    batch as long as max(remaining). Equal to emitted.sum() where every request emits alike and has
    as far to go; less where the requests with furthest to go are the ones drafts help least.

    `remaining` (B,) is each request's known distance; (S, B) rows are S samples of them
    (`remaining_lengths.sample_remaining`), and the batch's time is the mean over the samples: the
    request that finishes last is known only in expectation, and one that accepts little weighs in
    as often as it is likely to be the last."""
    left = np.maximum(np.atleast_2d(np.asarray(remaining, dtype=np.float64)), 1.0)
    plain = left.max(axis=1).mean()
    return left.shape[1] * float(plain / (left / emitted).max(axis=1).mean())


def draining_tokens_by_cap(emitted: np.ndarray, remaining: np.ndarray | Sequence[int]) -> np.ndarray:
    """`draining_tokens` of every row of emitted (C, B) at once: one figure a cap."""
    left = np.maximum(np.atleast_2d(np.asarray(remaining, dtype=np.float64)), 1.0)  # (S, B)
    plain = left.max(axis=1).mean()
    last = (left[:, None, :] / emitted[None, :, :]).max(axis=2).mean(axis=0)  # (C,)
    return left.shape[1] * (plain / last)


def tree_seconds(model: CostModel, batch_size: int, nodes: int, context_length: float = 0.0) -> float:
    """A forward verifying a tree of `nodes` nodes a row, after drafting it."""
    drafting = model.draft_seconds(batch_size, min(nodes, TREE_DRAFT_STEPS))
    return drafting + model.forward_seconds(batch_size, nodes + 1, context_length)


def tree_plan(
    model: CostModel,
    accepted: Callable[[int], float],
    limits: Sequence[int],
    nodes: int,
    context_length: float = 0.0,
    time_scale: float = 1.0,
) -> Plan:
    """Every request a tree of min(nodes, its limit) nodes; accepted(n): draft tokens a tree of n
    nodes gets accepted (0 for n = 0)."""
    lengths = [min(nodes, k) for k in limits]
    per_size = Counter(lengths)  # requests cut short share a size: one estimate a size, not a request
    emitted = sum(count * (1.0 + (accepted(n) if n else 0.0)) for n, count in per_size.items())
    seconds = tree_seconds(model, len(lengths), max(lengths, default=0), context_length) * time_scale
    return Plan(lengths, True, emitted / seconds)


@dataclass
class AutoPolicy:
    """Exploration: the acceptance of a drafter on a workload is unknown until it drafts, and a prior
    that predicts a loss would never be corrected. So until `warmup_trials` draft tokens have been
    tried, and then on one forward in `probe_every` on average, a forward the model would run plain drafts
    `probe_length` tokens instead: a bounded cost that keeps the estimates live. Where the cost model
    predicts a probe forward to cost much more than a plain one (large batches on a CPU, where width
    costs nearly its size), probes are rarer, so that they cost at most `max_probe_overhead` of the
    plain forwards' time on average; and the measured cost holds them to that too: after warm-up, no
    probe runs while the probes' measured seconds beyond a plain forward's exceed `max_probe_overhead`
    of the plain forwards' measured seconds (a probe also pays verification over the vocabulary for
    every draft position, which a profile of forwards does not see).

    Probe forwards are drawn at random (seeded), not every `probe_every`-th forward: outputs have periodic
    structure, and a fixed period can resonate with it, always measuring alpha at the same place.

    No margin over plain decoding is asked of drafting: the comparison is the cost model's expected
    tokens per second, corrected by measured forward times.

    Forward times: the cost model's predictions are corrected by measured times
    (`ForwardTimeCalibration`). Probe forwards are left out of it: they run where the policy would not
    and a draft model catching up on the skipped forwards makes them slower than steady drafting.
    The other way round, while a batch-size bucket drafts and has no plain forward measured, one
    forward in `probe_every` on average decodes plain, so that the comparison has both sides. And once
    it has, while the next cap up (c + 1) is unmeasured in that bucket, one forward in `probe_every`
    drafts to it: an unmeasured cap borrows its correction from the measured ones, so a profile that
    overprices width (taken at another thread count, or without the engine's own per-forward work)
    would otherwise keep auto below a longer draft that pays, never measuring it. Measured, the caps
    next to the chosen one are re-measured on one probe step in four each (one forward in 64), so a
    measurement taken while the machine was busier (or a shape's first, slower forwards) does not
    settle the choice for good.

    Trees are explored too: a tree budget whose acceptance is not yet measured (over
    `tree_warmup_requests` request-forwards) is drafted on any forward where its estimate (at first
    the prior: the chain as deep as the tree grows) reaches `tree_probe_margin` of the chosen plan's
    rate; once all are measured, the best tree is drafted on a probe step where the plan is no tree,
    so that its acceptance stays current. Measured, trees compete on their measurements.

    Every probe above is priced against the horizon (`exploration`): it runs only where what it may
    find, used over the seconds of work the batch and the queue have left, is worth more than the
    seconds its forwards are predicted to lose beside the plan. A long rollout or a queue explores as
    above; a short one (a few dozen forwards) does not spend them on shapes that lose; an engine that
    does not report its queue explores as without a horizon."""

    cost_model: CostModel
    tracker: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    name: str = "auto"
    warmup_trials: int = 64
    probe_every: int = 16
    probe_length: int = 2
    max_probe_overhead: float = 0.01
    seed: int = 0
    calibration: ForwardTimeCalibration = field(default_factory=ForwardTimeCalibration)
    tree_budgets: tuple[int, ...] = (4, 8, 16)  # node budgets a tree is weighed at (up to max_draft)
    trees: TreeAcceptance = field(default_factory=TreeAcceptance)
    tree_warmup_requests: int = 8  # request-forwards a tree budget is measured over before it settles
    tree_probe_margin: float = 0.8
    exploration_spread: float = 0.25  # how far an unmeasured prediction may be off, relative (`exploration`)
    _rng: random.Random = field(init=False, repr=False)
    _decided: tuple[int, int, float, bool] | None = field(default=None, init=False, repr=False)
    coverage: DraftCoverage = field(default_factory=DraftCoverage)
    hold: PlainHold = field(default_factory=PlainHold)  # plain decoding held unpriced (`plain_hold`)
    _asked: tuple[int, ...] | None = field(default=None, init=False, repr=False)  # the last chains asked
    _context: float = field(default=0.0, init=False, repr=False)  # mean context of the last decision
    _probe_plain: float | None = field(
        default=None, init=False, repr=False
    )  # a probe's seconds had it run plain
    _probe_extra_seconds: float = field(default=0.0, init=False, repr=False)  # measured, over all probes
    _plain_seconds: float = field(default=0.0, init=False, repr=False)  # measured, over plain forwards
    _last_tree: bool = field(default=False, init=False, repr=False)  # the last forward drafted trees

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._length_rng = random.Random(self.seed + 1)
        if any(n < 1 for n in self.tree_budgets):
            raise ValueError(f"tree budgets must be >= 1 node, got {self.tree_budgets}")
        if self.exploration_spread < 0:
            raise ValueError(f"exploration_spread must be >= 0, got {self.exploration_spread}")

    def decide(self, batch: BatchView) -> DraftDecision:
        draw = self._rng.random()
        request_ids = [v.request_id for v in batch.requests]
        if self.hold.holds(request_ids, is_probe_step=draw * self.probe_every < 1.0):
            return self._held_plain(batch.batch_size)
        plan, best = self._plan(batch, draw)
        if any(plan.lengths) or any(best.lengths):  # or plain only to measure it
            self.hold.end()
        else:
            self.hold.start(request_ids)
        self._asked = None if plan.tree else tuple(plan.lengths)
        return DraftDecision(tuple(plan.lengths), tree=plan.tree)

    def _held_plain(self, batch_size: int) -> DraftDecision:
        """Plain decoding unpriced (`plain_hold`); its forward still calibrates plain's price."""
        self._probe_plain, self._asked = None, (0,) * batch_size
        self._decided = (batch_size, 0, self._predicted_seconds(batch_size, 0, False), False)
        return DraftDecision((0,) * batch_size)

    def new_target(self) -> None:
        """Acceptance is measured again, from the old target's carried as a prior
        (`AcceptanceTracker.new_target`): a warm-up of the trials it does not cover; forward times
        still hold and are kept."""
        self.tracker.new_target()
        self.trees.new_target()
        self.hold.end()

    def _plan(self, batch: BatchView, draw: float) -> tuple[Plan, Plan]:
        """The plan this forward runs, and the best one as priced (they differ where the forward
        probes); draw: this forward's uniform, which makes it a probe step or not."""
        options = self._candidates(batch)
        best = options.best
        self._decided, self._probe_plain = None, None
        is_probe_step = draw * self.probe_every < 1.0
        b = batch.batch_size
        plan = self._tree_probe(batch, options.trees, best, is_probe_step)
        if plan is None and not any(best.lengths) and self._is_draft_probe(batch, options, best, draw):
            self._probe_plain = self._plan_seconds(b, options.chain(0))
            return options.chain(self.probe_length), best
        if plan is None:
            plan = self._chain_probe(batch, options, best, draw * self.probe_every) if is_probe_step else best
        if any(plan.lengths) and self._plain_unmeasured(b):
            plan = options.chain(0)
        self._decided = (b, plan.cap, self._predicted_seconds(b, plan.cap, plan.tree), plan.tree)
        return plan, best

    def _is_draft_probe(self, batch: BatchView, options: Options, best: Plan, draw: float) -> bool:
        """Whether a forward the plan decodes plain drafts `probe_length` instead: through the warm-up
        (every request drafting tries at least one token a forward), then on a random share of
        forwards within the probe budget; either only where it pays over the work left."""
        warming = self.tracker.pooled_trials < self.warmup_trials
        if not warming and not (draw < self._probe_rate(batch.batch_size) and self._within_probe_budget()):
            return False
        trials_left = self.warmup_trials - self.tracker.pooled_trials if warming else 0.0
        forwards = max(1, math.ceil(trials_left / batch.batch_size))
        probe = options.chain(self.probe_length)
        return self._pays(batch, best, probe, forwards, prospect_rate=options.best_draft_rate)

    def _pays(
        self,
        batch: BatchView,
        best: Plan,
        probe: Plan,
        num_forwards: float,
        prospect_rate: float | None = None,
    ) -> bool:
        """Whether `probe` in place of `best` for `num_forwards` forwards repays its predicted loss
        over the work left (`exploration`); prospect_rate: the rate of what it measures, if not its own."""
        prospect = probe.rate if prospect_rate is None else prospect_rate
        price = Probe(self._plan_seconds(batch.batch_size, probe), probe.rate, prospect, num_forwards)
        return is_worth_probing(price, best.rate, seconds_left(batch, best.rate), self.exploration_spread)

    def _plan_seconds(self, batch_size: int, plan: Plan) -> float:
        """A plan's forward seconds as predicted and corrected by the measured ones."""
        scale = self.calibration.scale(batch_size, plan.cap, plan.tree)
        return self._predicted_seconds(batch_size, plan.cap, plan.tree) * scale

    def _plain_unmeasured(self, batch_size: int) -> bool:
        """Whether this bucket's drafting forwards are measured and its plain ones are not: plain's
        price would then be borrowed from drafting's, keeping the profile's ratio of width, and a
        profile from another machine (SmolLM2's priced a two-wide forward at batch 8 at 1.15x a plain
        one; here it costs 1.3x) would draft at a loss. The forward decodes plain instead, which costs
        nothing beside plain decoding, until plain is measured too. Whatever the horizon: a plan's
        predicted gain over plain is what an unmeasured plain forward would test, so pricing this
        forward by that prediction would trust the very figure it checks (SmolLM2, batch 8, 48 tokens,
        a queue: priced, chain-1 ran on 134 forwards of three rounds, 98 unpriced, at a loss there)."""
        calibration = self.calibration
        return calibration.is_measured(batch_size, is_drafting=True) and not calibration.is_measured(
            batch_size, is_drafting=False
        )

    def _predicted_seconds(self, batch_size: int, cap: int, tree: bool) -> float:
        if tree and cap:
            return tree_seconds(self.cost_model, batch_size, cap, self._context)
        return self.cost_model.step_seconds(batch_size, cap, self._context)

    def _chain_probe(self, batch: BatchView, options: Options, best: Plan, u: float) -> Plan:
        """A probe step's chains (`_cap_probe`); where the plan is a tree, the best chain one probe
        step in two, so that chains stay measured beside trees."""
        if best.tree:
            chain = options.best_chain
            is_probe = u < 0.5 and any(chain.lengths) and self._pays(batch, best, chain, 1)
            return chain if is_probe else best
        if not any(best.lengths):
            return best
        if not self.calibration.is_measured(batch.batch_size, is_drafting=False):
            return options.chain(0)
        return self._cap_probe(batch, options, best, u)

    def _cap_probe(self, batch: BatchView, options: Options, best: Plan, u: float) -> Plan:
        """A cap next to the plan's (`_neighbour_cap`), where measuring it pays."""
        b = batch.batch_size
        neighbour = self._neighbour_cap(b, best.cap, options.limits, u)
        if neighbour is None:
            return best
        probe = options.chain(neighbour)
        forwards = max(1, self.calibration.samples_needed(b, neighbour))
        return probe if self._pays(batch, best, probe, forwards) else best

    def _tree_probe(
        self, batch: BatchView, trees: list[Plan], best: Plan, is_probe_step: bool
    ) -> Plan | None:
        """A tree budget to measure instead of `best`, if one could reach `tree_probe_margin` of its
        rate on the current estimates and measuring it pays: the smallest whose acceptance is not yet
        measured, on any forward; once all are, the best tree on a probe step (where `best` is no tree)."""
        if self.tracker.pooled_trials < self.warmup_trials and self._wide_is_dear(batch.batch_size):
            return None
        hopeful = [p for p in trees if p.rate >= self.tree_probe_margin * best.rate]
        unmeasured = [p for p in hopeful if self.trees.trials(p.cap) < self.tree_warmup_requests]
        if unmeasured:
            worth = (p for p in unmeasured if self._pays(batch, best, p, self._tree_forwards(p, batch)))
            return next(worth, None)
        if is_probe_step and not best.tree and hopeful:
            top = max(hopeful, key=lambda p: p.rate)
            return top if self._pays(batch, best, top, 1) else None
        return None

    def _wide_is_dear(self, batch_size: int) -> bool:
        """Whether the smallest tree's forward is predicted to cost more than `DEAR_TREE` plain ones.
        There a tree waits for the chains' warm-up: its first estimate is the chains' alpha, which
        the warm-up measures on narrower forwards (SmolLM2 at batch 64 on one CPU thread: a four-node
        tree probed on the second forward took 4.3x a plain one, the warm-up's chains 1.7-2.4x)."""
        smallest = min(self.tree_budgets)
        tree = tree_seconds(self.cost_model, batch_size, smallest, self._context)
        return tree > DEAR_TREE * self.cost_model.step_seconds(batch_size, 0, self._context)

    def _tree_forwards(self, tree: Plan, batch: BatchView) -> int:
        """Forwards until a tree budget is measured over `tree_warmup_requests` request-forwards."""
        requests_left = self.tree_warmup_requests - self.trees.trials(tree.cap)
        return max(1, math.ceil(requests_left / batch.batch_size))

    def _budgets(self, limits: list[int]) -> list[int]:
        top = max(limits, default=0)
        return [n for n in self.tree_budgets if n <= top]

    def _neighbour_cap(self, batch_size: int, cap: int, limits: list[int], u: float) -> int | None:
        """The cap a probe step drafts to instead of `cap`, if any: the next cap up while it is
        unmeasured in this bucket, else (u uniform in [0, 1)) the next one up for u < 1/4 and the next
        one down (to 1) for 1/4 <= u < 1/2, so both neighbours' measurements stay current."""
        up = cap + 1 if cap < max(limits) else None
        down = cap - 1 if cap > 1 else None
        if up is not None and not self.calibration.is_measured_cap(batch_size, up):
            return up
        return up if u < 0.25 else down if u < 0.5 else None

    def _within_probe_budget(self) -> bool:
        return self._probe_extra_seconds <= self.max_probe_overhead * self._plain_seconds

    def _probe_rate(self, batch_size: int) -> float:
        """How often a plain forward becomes a probe: 1 / probe_every, or less where a probe forward's
        predicted extra time would make probing cost more than `max_probe_overhead`."""
        plain = self.cost_model.step_seconds(batch_size, 0, self._context)
        extra = self.cost_model.step_seconds(batch_size, self.probe_length, self._context) / plain - 1.0
        return (
            min(1.0 / self.probe_every, self.max_probe_overhead / extra)
            if extra > 0
            else 1.0 / self.probe_every
        )

    def _candidates(self, batch: BatchView) -> Options:
        """This forward's chains and its tree plans (one a budget, where trees are on offer)."""
        self.tracker.update(batch, fold=not self._last_tree)  # a tree's acceptance is not a chain's
        alphas = [self.tracker.alpha(v.request_id) for v in batch.requests]
        limits = batch.draft_limits()
        contexts = [float(v.num_context_tokens or v.num_output_tokens) for v in batch.requests]
        self._context = sum(contexts) / len(contexts) if contexts else 0.0
        b = batch.batch_size
        remaining = self._remaining_samples(batch) if batch.drains else None
        rates = chain_rates(
            self.cost_model,
            alphas,
            limits,
            self._context,
            lambda cap: self.calibration.scale(b, cap),
            remaining,
            self.coverage.share,
        )
        return Options(limits, rates, self._tree_plans(batch, limits) if batch.trees else [])

    def _tree_plans(self, batch: BatchView, limits: list[int]) -> list[Plan]:
        pooled = self.tracker.pooled_alpha
        b = batch.batch_size
        return [
            tree_plan(
                self.cost_model, lambda n: self.trees.expected_accepted(n, pooled), limits, nodes,
                self._context, self.calibration.scale(b, nodes, tree=True),
            )
            for nodes in self._budgets(limits)
        ]  # fmt: skip

    def _remaining_samples(self, batch: BatchView) -> np.ndarray:
        """(DRAIN_SAMPLES, B) remaining lengths of a draining batch's requests (`remaining_lengths`)."""
        views = batch.requests
        return sample_remaining(
            [v.num_output_tokens for v in views],
            [v.num_remaining for v in views],
            np.asarray(batch.finished_lengths, dtype=np.int64),
            DRAIN_SAMPLES,
            self._length_rng,
            [v.prompt_lengths for v in views],
        )

    def observe(self, stats: ForwardStats) -> None:
        seconds = stats.steady_seconds
        self._last_tree = stats.tree
        if stats.num_drafted:
            self.hold.end()
        if self._asked is not None and not stats.tree and len(stats.drafted) == len(self._asked):
            self.coverage.record(self._asked, stats.drafted)
        if self._probe_plain is not None:
            self._probe_extra_seconds += max(0.0, seconds - self._probe_plain)
        elif self._decided is not None and self._decided[1] == 0:
            self._plain_seconds += seconds
        if self._decided is not None:
            batch_size, cap, predicted, tree = self._decided
            self.calibration.record(batch_size, cap, predicted, seconds, tree=tree and stats.tree)
            if tree and stats.tree:
                self.trees.record(cap, stats.drafted, stats.accepted)
