"""What one forward's verification reads besides the logits, packed once for both steps.

Each request's inputs (its noise key, its drafts, its sampling settings and the output position each
of its rows' samples fills) are packed on the host into one integer and one float array, a row per
request at the row the forward gives it, and unpacked on the device into `VerifyInputs`: two copies
to the device whatever the batch. The eager step packs its requests in order (`verify_inputs`); the
captured one packs them at their cache slots into a bucket's rows and unpacks inside its graph
(`engine.captured_step`). A drafter's probabilities (rejection mode's q, a (B, K, V) tensor) travel
only on the eager step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from specroll.drafting.protocol import Draft
from specroll.engine.request import Request
from specroll.model.masks import depths
from specroll.sampling import SamplingRows, sampling_flags

# integer columns: noise key, drafts, top-k, then each row's output position (T) and draft (T - 1)
REQUEST_ID, NUM_DRAFTS, TOP_K, POSITIONS = 0, 1, 2, 3
TEMPERATURE, TOP_P = 0, 1  # float columns


@dataclass(frozen=True)
class VerifyInputs:
    """On the logits' device, for B requests of Tl = K + 1 rows each."""

    rows: SamplingRows  # (B * Tl,) each row's sampling settings
    draft_tokens: torch.Tensor  # (B, K) long, padded with 0
    num_drafts: torch.Tensor  # (B,) long
    request_ids: torch.Tensor  # (B, 1) long: each request's noise key (`Request.noise_key`)
    positions: torch.Tensor  # (B, Tl) long: the output position each row's sample fills
    draft_probs: torch.Tensor | None  # (B, K, V) q, or None when every draft is deterministic


def verify_inputs(
    requests: Sequence[Request], drafts: Sequence[Draft], Tl: int, V: int, device: torch.device
) -> VerifyInputs:
    """The eager step's inputs: request b in row b."""
    ints, floats, flags = pack_inputs(requests, drafts, range(len(requests)), len(requests), Tl)
    on_device = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return unpack_inputs(on_device(ints), on_device(floats), Tl, flags, _draft_probs(drafts, Tl, V, device))


def pack_inputs(
    requests: Sequence[Request],
    drafts: Sequence[Draft],
    rows: Sequence[int],
    num_rows: int,
    T: int,
    ahead: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, tuple[bool, bool]]:
    """Request i's inputs in row rows[i] of integers (num_rows, 3 + 2T - 1) and floats (num_rows, 2),
    and what the host knows of the sampling (`sampling_flags`). Rows without a
    request sample at temperature 1 with no filter: their results are never read. ahead: for each
    request, the tokens it emits in a step not yet read back, before this one's (its outputs are that
    much further on); none by default."""
    ahead = ahead or [0] * len(requests)
    ints = np.zeros((num_rows, POSITIONS + 2 * T - 1), dtype=np.int64)
    floats = np.ones((num_rows, 2), dtype=np.float32)
    for r, d, row, before in zip(requests, drafts, rows, ahead):
        p = r.params
        ints[row, [REQUEST_ID, NUM_DRAFTS, TOP_K]] = r.noise_key, d.num_tokens, p.top_k
        ints[row, POSITIONS : POSITIONS + T] = output_positions(r, d, T, before)
        ints[row, POSITIONS + T : POSITIONS + T + d.num_tokens] = d.token_ids
        floats[row] = p.temperature, p.top_p
    params = [r.params for r in requests]
    flags = sampling_flags(
        [p.temperature for p in params], [p.top_k for p in params], [p.top_p for p in params]
    )
    return ints, floats, flags


def unpack_inputs(
    ints: torch.Tensor,
    floats: torch.Tensor,
    T: int,
    flags: tuple[bool, bool, bool],
    draft_probs: torch.Tensor | None = None,
) -> VerifyInputs:
    """`pack_inputs`'s arrays, on the device, as `VerifyInputs` (views: no host synchronisation, so a graph
    can record it)."""
    per_row = lambda column: column[:, None].expand(-1, T).reshape(-1)  # noqa: E731  (R * T,)
    rows = SamplingRows(
        per_row(floats[:, TEMPERATURE]), per_row(ints[:, TOP_K]), per_row(floats[:, TOP_P]), *flags
    )
    return VerifyInputs(
        rows,
        ints[:, POSITIONS + T :],  # (R, T - 1) drafts
        ints[:, NUM_DRAFTS],
        ints[:, REQUEST_ID : REQUEST_ID + 1],
        ints[:, POSITIONS : POSITIONS + T],
        draft_probs,
    )


def row_parents(draft: Draft) -> list[int] | None:
    """Parents of the forward's new tokens: the fed token (row 0) and then the draft's nodes."""
    if not draft.is_tree:
        return None
    return [-1, *(p + 1 for p in draft.parents)]


def output_positions(request: Request, draft: Draft, Tl: int, ahead: int = 0) -> list[int]:
    """The output position whose token each of the Tl rows' sample fills (the keyed noise's index),
    `ahead` tokens past the request's committed output."""
    first = request.num_output_tokens + ahead
    return [first + depth for depth in _row_depths(draft, Tl)]


def _row_depths(draft: Draft, Tl: int) -> list[int]:
    """Depth of each of the Tl rows' context below the fed token: a chain's row i is at depth i."""
    parents = row_parents(draft)
    rows = [] if parents is None else depths(parents)
    return rows + list(range(len(rows), Tl))


def _draft_probs(drafts: Sequence[Draft], Tl: int, V: int, device: torch.device) -> torch.Tensor | None:
    """(B, K, V) q: the drafter's probabilities, or one-hot rows for deterministic drafts."""
    if all(d.probs is None for d in drafts):
        return None
    padded = [[*d.token_ids, *[0] * (Tl - 1 - d.num_tokens)] for d in drafts]
    tokens = torch.tensor(padded, dtype=torch.long, device=device).view(len(drafts), -1)
    q = torch.zeros(*tokens.shape, V, device=device).scatter_(2, tokens[..., None], 1.0)
    for b, d in enumerate(drafts):
        if d.probs is not None and d.num_tokens:
            q[b, : d.num_tokens] = torch.as_tensor(d.probs, dtype=torch.float32, device=device)[
                : d.num_tokens
            ]
    return q
