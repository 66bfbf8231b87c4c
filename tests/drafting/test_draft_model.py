"""The draft-model drafter: greedy drafts are the draft model's own greedy continuation, and the
drafter's cache rolls back to what was committed."""

from __future__ import annotations

import pytest
import torch

from specroll.drafting.draft_model import DraftModelDrafter
from specroll.drafting.protocol import DraftQuery, RequestInfo
from tiny_checkpoints import save_tiny_checkpoint


def greedy(hf_model, context: list[int], k: int) -> list[int]:
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([context]), max_new_tokens=k, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(context) :].tolist()


def test_greedy_drafts_follow_the_draft_model_and_roll_back(tmp_path):
    hf_model = save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)
    drafter = DraftModelDrafter.from_pretrained(tmp_path, max_batch_size=2, capacity=64, draw="argmax")
    contexts = {0: [5, 6, 7, 8], 1: [9, 10, 11]}
    for request_id, context in contexts.items():
        drafter.begin(RequestInfo(request_id, 0, tuple(context)))
    drafts = drafter.propose([DraftQuery(r, 0, c, len(c), 4) for r, c in contexts.items()])
    for draft, (request_id, context) in zip(drafts, contexts.items()):
        assert draft.request_id == request_id and draft.probs is None
        assert draft.token_ids == greedy(hf_model, context, 4)
    # request 0 commits a different token than drafted: the next draft continues the new context
    committed = contexts[0] + [drafts[0].token_ids[0], (drafts[0].token_ids[1] + 1) % 97]
    drafter.observe(0, committed[4:])
    [again] = drafter.propose([DraftQuery(0, 0, committed, 4, 3)])
    assert again.token_ids == greedy(hf_model, committed, 3)


@pytest.mark.parametrize("min_split_saving", [10**6, 1])  # catch-ups in one forward, or split by length
def test_drafts_stay_right_as_requests_finish_and_queries_change_order(tmp_path, min_split_saving):
    # the drafter moves cache rows so the queried requests sit in consecutive slots; a wrong move
    # would cost only speed in the engine, so the drafts themselves are checked here
    hf_model = save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)
    drafter = DraftModelDrafter.from_pretrained(tmp_path, max_batch_size=4, capacity=64, draw="argmax")
    drafter.min_split_saving = min_split_saving
    contexts = {0: [5, 6, 7, 8], 1: [9, 10, 11], 2: [12, 13, 14, 15, 16], 3: [17, 18]}
    for request_id, context in contexts.items():
        drafter.begin(RequestInfo(request_id, 0, tuple(context)))

    def check(order: list[int], budgets: list[int]) -> None:
        drafts = drafter.propose([DraftQuery(r, 0, contexts[r], 2, k) for r, k in zip(order, budgets)])
        for draft, request_id, k in zip(drafts, order, budgets):
            assert draft.request_id == request_id
            assert draft.token_ids == greedy(hf_model, contexts[request_id], k), (order, request_id)
            contexts[request_id] = (
                contexts[request_id] + draft.token_ids[:1] + [(draft.token_ids[-1] + 3) % 97]
            )
            drafter.observe(request_id, contexts[request_id][-2:])

    check([0, 1, 2, 3], [2, 4, 1, 3])
    drafter.finish(1)
    check([3, 0, 2], [4, 2, 3])
    contexts[4] = [20, 21, 22]
    drafter.begin(RequestInfo(4, 0, tuple(contexts[4])))
    check([2, 4], [1, 3])
    check([0, 4, 3, 2], [3, 3, 1, 2])
