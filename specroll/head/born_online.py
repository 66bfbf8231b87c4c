"""A draft head born with the training run: made from the target alone, before any response exists.

`specroll train --online-head` on a checkpoint with no head of its own starts one here, so that no
warm-start recipe (a rollout, teacher-forced features, minutes of training) has to come first: the
run's own rollouts are its data (TLT's spot trainer learns from the first step on).

Two choices need data a head has not seen yet:
- **The draft vocabulary** (the tokens it can propose; a warm start takes those with the most target
  probability mass over its responses, `head.training.draft_vocabulary`). Here: the tokens of the
  run's prompts (an answer repeats its question's numbers and names), the stop tokens, then the
  lowest ids of the tokenizer. In a byte-level BPE vocabulary (SmolLM2's, Qwen's, Llama's) ids are
  assigned in merge order, so the lowest ids are the bytes and the merges most frequent in the
  tokenizer's corpus: a frequency ranking that needs no data. A token missing from it is never
  drafted, which costs speed, never a token.
- **The weights**: the output layer starts at the target's rows for those tokens
  (`DraftHead.init_from_target`), the blocks as `nn.Linear` draws them. Until it has trained, such a
  head drafts nothing (`DraftHeadDrafter.hold_drafts`): its first proposals would be wrong and cost a
  wider verification each.

The shape is the device's (`head.shape.default_shape`): on a CPU, one draft deep, one block.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from specroll.drafting.head_model import DraftHead, HeadConfig, default_feature_layers
from specroll.head.shape import HeadShape


def starting_vocabulary(
    prompts: Iterable[Sequence[int]], size: int, vocab_size: int, always: Sequence[int] = ()
) -> torch.Tensor:
    """(min(size, vocab_size),) long, ascending: the `always` tokens, then the prompts' tokens by
    count (ties to the lower id), then the lowest ids not yet chosen."""
    size = min(size, vocab_size)
    counts: dict[int, int] = {}
    for prompt in prompts:
        for token in prompt:
            counts[token] = counts.get(token, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    chosen = dict.fromkeys(t for t in (*always, *ranked) if 0 <= t < vocab_size)
    for token in range(vocab_size):
        if len(chosen) >= size:
            break
        chosen.setdefault(token)
    return torch.tensor(sorted(list(chosen)[:size]), dtype=torch.long)


def born_online_head(
    lm_head_weight: torch.Tensor,
    num_layers: int,
    prompts: Iterable[Sequence[int]],
    shape: HeadShape,
    stop_token_ids: Sequence[int] = (),
    target_name: str = "",
) -> DraftHead:
    """A new head for a target whose output layer is `lm_head_weight` (V, H), with `num_layers`
    decoder layers (the fused features are the warm start's default: `default_feature_layers`)."""
    vocab_size, hidden_size = lm_head_weight.shape
    config = HeadConfig(
        hidden_size,
        vocab_size,
        min(shape.draft_vocab_size, vocab_size),
        -(-8 * hidden_size // 3 // 64) * 64,
        shape.num_blocks,
        target=target_name,
        feature_layers=default_feature_layers(num_layers),
        train_depth=shape.depth,
    )
    vocabulary = starting_vocabulary(prompts, config.draft_vocab_size, vocab_size, stop_token_ids)
    head = DraftHead(config, vocabulary)
    head.init_from_target(lm_head_weight.detach().float().cpu())
    return head
