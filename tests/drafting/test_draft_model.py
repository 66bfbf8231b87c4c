"""The draft-model drafter: greedy drafts are the draft model's own greedy continuation, and the
drafter's cache rolls back to what was committed."""

from __future__ import annotations

import torch

from specroll.drafting.draft_model import DraftModelDrafter
from specroll.drafting.protocol import DraftQuery, RequestInfo
from tiny_checkpoints import save_tiny_checkpoint


def greedy(hf_model, context: list[int], k: int) -> list[int]:
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([context]), max_new_tokens=k, do_sample=False,
                                eos_token_id=None, pad_token_id=0)
    return out[0, len(context):].tolist()


def test_greedy_drafts_follow_the_draft_model_and_roll_back(tmp_path):
    hf_model = save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)
    drafter = DraftModelDrafter.from_pretrained(tmp_path, max_batch_size=2, capacity=64)
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
