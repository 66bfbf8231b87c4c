"""The draft ladder switches drafters inside the engine, both ways, and stays lossless.

Two drafters replay a plain rollout in alternating phases of each response: `a` drafts the right
tokens in phases 1 and 3 and wrong ones in phase 2, `b` the reverse. `b` is profiled as poor, so the
ladder reaches it only by probing it once `a` turns poor, and comes back to `a` the same way.
"""

from __future__ import annotations

from helpers import assert_lossless, make_engine, workload

from specroll.drafting.protocol import BaseDrafter, Draft
from specroll.drafting.switching import SwitchingDrafter
from specroll.engine.engine import add_requests
from specroll.policies.cost_model import CostModel
from specroll.policies.ladder import DraftLadder, LadderPolicy, Rung

PHASES = (40, 100)  # output positions where phase 2 and phase 3 begin
MAX_TOKENS = 150


class PhaseDrafter(BaseDrafter):
    """Replays `outputs` where the output position lies in one of `right_phases`, else drafts a
    wrong token; logs (name, position) of every query."""

    def __init__(self, name, outputs, right_phases, log, vocab_size=97):
        self.name, self.outputs, self.right_phases, self.log = name, outputs, right_phases, log
        self.vocab_size = vocab_size

    def propose(self, queries):
        return [self._propose(q) for q in queries]

    def _propose(self, query):
        done = len(query.context) - query.num_prompt_tokens
        self.log.append((self.name, done))
        tokens = self.outputs[query.request_id][done : done + query.budget]
        if _phase(done) not in self.right_phases:
            tokens = [(t + 1) % self.vocab_size for t in tokens]
        return Draft(query.request_id, tokens)


def _phase(position):
    return 1 + sum(position >= p for p in PHASES)


def _requests():
    return workload(num_prompts=2, n=2, max_tokens=MAX_TOKENS)


def _run(engine, requests):
    assert not add_requests(engine, requests)
    engine.run()
    return requests


def test_the_ladder_switches_drafters_both_ways_in_the_engine(qwen2_dir, one_thread):
    plain = _run(make_engine(qwen2_dir, max_model_len=200), _requests())
    assert min(len(r.output_token_ids) for r in plain) == MAX_TOKENS  # every phase is reached
    outputs = {r.request_id: r.output_token_ids for r in plain}
    log = []
    drafter = SwitchingDrafter(
        {"a": PhaseDrafter("a", outputs, (1, 3), log), "b": PhaseDrafter("b", outputs, (2,), log)}
    )
    ladder = DraftLadder((Rung("a", 0.8), Rung("b", 0.1)), CostModel(c_base=1.0, c_tok=0.05))
    engine = make_engine(qwen2_dir, drafter, LadderPolicy(ladder), max_model_len=200)
    assert_lossless(plain, _run(engine, _requests()), engine)
    late_in = {
        phase: [name for name, pos in log if _phase(pos) == phase and pos >= start + 30]
        for phase, start in ((1, 0), (2, PHASES[0]), (3, PHASES[1]))
    }
    for phase, right in ((1, "a"), (2, "b"), (3, "a")):
        proposers = late_in[phase]
        assert proposers.count(right) > len(proposers) / 2, (phase, proposers[:20])
