"""SpecActor's decoupled-speculation planning (§4.1): the TGS model, Algorithm 1 and Algorithm 2.

Drafting and verification times are affine in the batch size b (fitted by offline profiling):
D_gd(b) = b D' + alpha, V_gv,w(b) = b V' + beta, each the cost model's `Affine` (intercept alpha or
beta, slope D' or V'). Under decoupled execution the drafter runs ahead on its own GPUs, so a window
of w tokens takes IL = max(w D(b), V(b)) and yields tau_w tokens (`decoupled_expected_tokens`);
coupled execution drafts then verifies in turn and yields the usual `expected_tokens`
(`specroll.policies.speculation_math`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from specroll.policies.cost_model import Affine
from specroll.policies.speculation_math import expected_tokens

_NEAR_ONE = 1.0 - 1e-9


def decoupled_expected_tokens(alpha: np.ndarray | float, window: np.ndarray | int) -> np.ndarray:
    """SpecActor §4.1 tau_w: expected tokens per window under decoupled drafting.

    tau_w = sum_{a<w} p^a (1-p) (a+1)/2 + w p^w. The (a+1)/2 factor is the paper's charge for the
    tokens the drafter ran ahead on and must throw away after a rejection at position a.
    """
    p = np.minimum(np.asarray(alpha, dtype=np.float64), _NEAR_ONE)
    w = np.asarray(window, dtype=np.int64)
    max_w = int(np.max(w)) if w.size else 0
    total = np.zeros(np.broadcast(p, w).shape)
    for a in range(max_w):
        partial = p**a * (1.0 - p) * (a + 1) / 2.0
        total = total + np.where(a < w, partial, 0.0)
    return total + w * p**w


@dataclass(frozen=True)
class DecoupledPlan:
    num_draft_gpus: int  # g_d
    num_verify_gpus: int  # g_v: the verifier's parallel degree
    window: int  # w: tokens the drafter may run ahead
    tokens_per_second: float  # TGS of the plan at its batch size

    @property
    def gpus_per_unit(self) -> int:
        return self.num_draft_gpus + self.num_verify_gpus


DraftProfile = Callable[[int], Affine]  # g_d -> D_gd
VerifyProfile = Callable[[int, int], Affine]  # (g_v, w) -> V_gv,w


def decoupled_tgs(p: float, window: int, batch: float, draft: Affine, verify: Affine) -> float:
    """TGS_gd,gv,w(b) = tau_w / max(w D(b), V(b)) per request."""
    interval = max(window * draft(batch), verify(batch))
    return float(decoupled_expected_tokens(p, window)) / interval


def coupled_tgs(p: float, window: int, batch: float, draft: Affine, verify: Affine) -> float:
    """TGS_C,w(b): draft w tokens, then verify them; the paper omits it, we use the i.i.d. form."""
    return expected_tokens(p, window) / (window * draft(batch) + verify(batch))


def plan_decoupled(
    total_batch: int,
    total_gpus: int,
    verify_gpu_options: Iterable[int],
    p: float,
    draft: DraftProfile,
    verify: VerifyProfile,
    max_window: int = 16,
) -> DecoupledPlan:
    """Algorithm 1: enumerate (g_v, g_d <= g_v, w <= w_max) and keep the highest cluster TGS.

    The paper maximises per-request TGS at the resulting batch b = ceil((g_d+g_v) B / G); we compare
    b * TGS per unit times the number of units, i.e. cluster tokens per second, which ranks plans the
    same way when every unit holds the same b and also rejects plans whose units do not fit.
    """
    best = DecoupledPlan(0, 0, 0, 0.0)
    for g_v in verify_gpu_options:
        for g_d in range(1, g_v + 1):
            num_units = total_gpus // (g_d + g_v)
            if num_units < 1:
                continue
            batch = math.ceil(total_batch / num_units)
            for window in range(1, _max_window(draft(g_d), verify(g_v, 1), max_window) + 1):
                tgs = decoupled_tgs(p, window, batch, draft(g_d), verify(g_v, window))
                cluster = tgs * min(batch, total_batch) * num_units
                if cluster > best.tokens_per_second:
                    best = DecoupledPlan(g_d, g_v, window, cluster)
    if best.window == 0:
        raise ValueError("no decoupled plan fits the given GPUs")
    return best


def _max_window(draft: Affine, verify: Affine, cap: int) -> int:
    """Algorithm 1 line 5: beyond max(V'/D', beta/alpha) the drafter only adds waste."""
    ratios = [
        verify.slope / draft.slope if draft.slope > 0 else cap,
        verify.intercept / draft.intercept if draft.intercept > 0 else cap,
    ]
    return int(min(cap, max(1, math.ceil(max(ratios)))))


@dataclass(frozen=True)
class RequestPlan:
    window: int  # w_r
    is_coupled: bool  # m_r: coupled (C) or decoupled (D)


def reconfigure(
    probabilities: np.ndarray,  # (num_requests,) profiled per-token acceptance of each request
    plan: DecoupledPlan,
    draft: Affine,
    verify_by_window: Callable[[int], Affine],
) -> list[RequestPlan | None]:
    """Algorithm 2: for requests below the mean acceptance, pick the better of coupled/decoupled at b=1.

    Requests at or above the mean keep the plan's window (None in the result).
    """
    mean = float(np.mean(probabilities)) if len(probabilities) else 0.0
    result: list[RequestPlan | None] = []
    for p in probabilities:
        result.append(
            _best_request_plan(float(p), plan.window, draft, verify_by_window) if p < mean else None
        )
    return result


def _best_request_plan(
    p: float, max_window: int, draft: Affine, verify_by_window: Callable[[int], Affine]
) -> RequestPlan:
    return best_request_plan(p, 1, max_window, draft, verify_by_window)


def best_request_plan(
    p: float,
    batch: int,
    max_window: int,
    draft: Callable[[float], float],  # b -> seconds of one draft step (an Affine, or a cost model's)
    verify_by_window: Callable[[int], Callable[[float], float]],  # w -> (b -> seconds of a verification)
) -> RequestPlan:
    """Algorithm 2 lines 3-5 at `batch` running requests: argmax_w TGS_C,w(p, b) and argmax_w
    TGS_gd,gv,w(p, b), then the better of the two (ties go to coupled, the smaller window); the
    same TGS as `coupled_tgs` and `decoupled_tgs`, over every window at once.

    The paper evaluates at b = 1; a worker whose batch has not yet shrunk to one passes its own."""
    windows = np.arange(1, max_window + 1)  # (W,)
    draft_step = draft(batch)
    verify = np.array([verify_by_window(int(w))(batch) for w in windows])  # (W,)
    coupled = expected_tokens(p, windows) / (windows * draft_step + verify)
    decoupled = decoupled_expected_tokens(p, windows) / np.maximum(windows * draft_step, verify)
    best = int(np.argmax(np.stack([coupled, decoupled], axis=1)))  # (W, 2) flattened: w, then mode
    return RequestPlan(int(windows[best // 2]), best % 2 == 0)
