"""Verification of draft tokens as pure functions: tensors and explicit uniforms in, tensors out.

Convention (Leviathan et al. 2023): p is the target's sampling distribution, q the drafter's.
Glossary: for one request and one forward, the *output tokens* are the accepted draft tokens followed
by exactly one token drawn from the target: the *recovered* token where a draft was rejected, or the
*bonus* token when every draft was accepted. So a forward always emits num_accepted + 1 tokens.

Two modes:
- exact: the target's own token at every position is fixed in advance by a keyed uniform
  (`specroll.noise`), so verification accepts the longest draft prefix equal to those tokens and
  then emits the target's token at the first mismatch. The output is token-identical to plain
  decoding with the same seed, whatever the drafter proposed. A tree of drafts keeps its deepest
  path of such tokens (`drafting.draft_tree.accepted_path`, torch-free: replaying a recorded
  response reads it too).
- rejection: speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2)
  for drafters that give probabilities: accept draft x with probability min(1, p(x) / q(x)); at the
  first rejection draw from norm(max(0, p - q)); if all are accepted draw the bonus from p. A
  deterministic drafter has q = one-hot(x). The output follows p exactly in distribution.
"""

from __future__ import annotations

import torch

from specroll.sampling import sample_from


def accepted_prefix(is_accepted: torch.Tensor, num_drafts: torch.Tensor) -> torch.Tensor:
    """is_accepted (B, K) bool, num_drafts (B,) -> length of each row's accepted prefix (B,)."""
    K = is_accepted.shape[1]
    valid = torch.arange(K, device=is_accepted.device)[None] < num_drafts[:, None]
    return (is_accepted & valid).long().cumprod(dim=1).sum(dim=1)


def verify_exact(
    draft_tokens: torch.Tensor, num_drafts: torch.Tensor, target_tokens: torch.Tensor
) -> torch.Tensor:
    """Exact mode for linear drafts.

    draft_tokens (B, K), num_drafts (B,), target_tokens (B, K+1): the target's own token at each of
    the K+1 positions -> num_accepted (B,). The output tokens are target_tokens[b, :num_accepted+1].
    """
    return accepted_prefix(draft_tokens == target_tokens[:, :-1], num_drafts)


def verify_rejection(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    num_drafts: torch.Tensor,
    accept_u: torch.Tensor,
    sample_u: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling for linear drafts.

    target_probs (B, K+1, V): p at each draft position and the bonus position;
    draft_probs (B, K, V) q, or None for deterministic drafts (q = one-hot of the draft token);
    draft_tokens (B, K) long; num_drafts (B,); accept_u (B, K) and sample_u (B, K+1) uniforms in (0, 1).
    Returns num_accepted (B,) and next_token (B,): the recovered or bonus token.
    """
    B, K = draft_tokens.shape
    p_draft = target_probs[:, :K].gather(2, draft_tokens[..., None]).squeeze(-1)  # (B, K)
    q_draft = (
        torch.ones_like(p_draft)
        if draft_probs is None
        else draft_probs.gather(2, draft_tokens[..., None]).squeeze(-1)
    )
    # accept with probability min(1, p/q), written without division: u * q < p
    num_accepted = accepted_prefix(accept_u.to(p_draft.dtype) * q_draft < p_draft, num_drafts)
    rows = torch.arange(B, device=draft_tokens.device)
    p_next = target_probs[rows, num_accepted]  # (B, V)
    residual = _residual(p_next, draft_probs, draft_tokens, num_accepted, num_drafts)
    return num_accepted, sample_from(residual, sample_u[rows, num_accepted])


def _residual(
    p_next: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    num_accepted: torch.Tensor,
    num_drafts: torch.Tensor,
) -> torch.Tensor:
    """max(0, p - q) at rejected rows, p itself at fully accepted rows (the bonus), unnormalised."""
    B, K = draft_tokens.shape
    is_rejected = num_accepted < num_drafts
    at = num_accepted.clamp(max=max(K - 1, 0))
    rows = torch.arange(B, device=draft_tokens.device)
    if K == 0:
        return p_next
    if draft_probs is None:
        q = torch.zeros_like(p_next).scatter_(1, draft_tokens[rows, at][:, None], 1.0)
    else:
        q = draft_probs[rows, at]
    residual = (p_next - q).clamp_(min=0)
    # p == q up to rounding leaves no mass; then p itself is the right distribution (nothing rejected it)
    is_empty = residual.sum(-1) <= 0
    residual = torch.where((is_rejected & ~is_empty)[:, None], residual, p_next)
    return residual
