"""The shared cost model every speculation policy reasons with. Imports no torch.

One verification forward over `batch_size` rows, each `num_tokens` wide (the fed token plus the
draft; rows are padded to the widest one), reading `context_length` cached positions, takes

    t = c_base + c_row * b + c_row_ctx * (b * ctx) + c_tok * (b * n) + c_ctx * (b * n * ctx)

the token terms being DAS eq. 1. c_base is the per-forward cost (weights streamed once, launches,
Python), c_row the cost of one row whatever its width, c_row_ctx reading one row's cached position once,
c_tok the cost of one token, c_ctx the attention cost of one token against one cached position. The row
terms let a forward's cost grow more slowly with its width than the token terms alone would (a row's
fixed work is shared by its tokens). Drafting with a draft model costs, per draft token, D(b) = d_base +
d_row * b (SpecActor §4.1, affine in b); a drafter that needs no model (prompt lookup) has D = 0. For a
fixed width n and context the verification time is itself affine in b, V(b) = c_base + b * n * (c_tok +
c_ctx * ctx) (`verify_affine`).

Speculation math uses one per-token acceptance probability alpha (acceptance of draft token i is
independent given the ones before it were accepted, Leviathan et al. 2023): a draft of k tokens
emits `speculation_math.expected_tokens(alpha, k)` tokens in expectation.

A profile's fit also keeps, at every (batch size, width) of its grid, the ratio of the measured
seconds to the fitted (`prices`, the median over contexts), and prices a forward as the fit times
that ratio, read at the nearest measured batch size at or below and interpolated between widths: the
fit's one cost a token cannot hold both ends of a CPU, where at batch 1 a forward reads the weights
once and a 17-token row costs little more than a 1-token one, while at batch 64 every token costs its
arithmetic. So policies see width as cheap where it was measured cheap (trees at small batch).

A fit holds the device type its forwards were measured on (`device`: cpu, cuda, ...), and prices
forwards there only: a CPU's figures would misprice every step on a GPU (`check_profile_device`).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from specroll.policies.speculation_math import expected_tokens


@dataclass(frozen=True)
class Affine:
    """Seconds affine in a batch size, y = intercept + slope * x: SpecActor's D(b) and V(b) (§4.1)."""

    intercept: float  # seconds whatever the batch
    slope: float  # seconds per row

    def __post_init__(self) -> None:
        if self.intercept < 0 or self.slope < 0:
            raise ValueError(f"affine latency coefficients must be non-negative, got {self}")

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x


@dataclass(frozen=True)
class LatencySample:
    """One measured forward (median over repetitions)."""

    batch_size: int
    num_tokens: int  # per row: the fed token plus the draft
    context_length: int
    seconds: float

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.num_tokens < 1 or self.context_length < 0 or self.seconds <= 0:
            raise ValueError(f"invalid latency sample {self}")


@dataclass(frozen=True)
class CostModel:
    c_base: float
    c_tok: float
    c_ctx: float = 0.0
    c_row: float = 0.0
    c_row_ctx: float = 0.0
    draft_base: float = 0.0  # D(b) = draft_base + draft_row * b, seconds per draft token
    draft_row: float = 0.0
    fit_error: float | None = None  # mean relative error on the samples it was fitted to
    source: str = ""  # what was measured, where
    device: str = "cpu"  # the device type the forwards were measured on (the in-code fits are a CPU's)
    dtype: str = ""  # the precision they ran in ("": not recorded, a fit older than the field)
    prices: tuple[tuple[int, int, float], ...] = ()  # (batch size, width, measured / fitted) on the grid

    def __post_init__(self) -> None:
        prices = tuple(sorted((int(b), int(n), float(r)) for b, n, r in self.prices))
        object.__setattr__(self, "prices", prices)  # a loaded profile's lists, as tuples
        if any(r <= 0 for _, _, r in self.prices):
            raise ValueError("a cost model's price ratios must be positive")
        if not self.device:
            raise ValueError("a cost model needs the device type it was measured on, got ''")
        for name in ("c_base", "c_tok", "c_ctx", "c_row", "c_row_ctx", "draft_base", "draft_row"):
            if getattr(self, name) < 0:
                raise ValueError(f"cost model coefficient {name} must be >= 0, got {getattr(self, name)}")
        if self.c_base + self.c_tok <= 0:
            raise ValueError("a cost model needs a positive c_base or c_tok")

    def forward_seconds(self, batch_size: int, num_tokens: int, context_length: float = 0.0) -> float:
        tokens = batch_size * num_tokens
        rows = self.c_row * batch_size + self.c_row_ctx * batch_size * context_length
        fitted = self.c_base + rows + self.c_tok * tokens + self.c_ctx * tokens * context_length
        return fitted * self.price_ratio(batch_size, num_tokens)

    def price_ratio(self, batch_size: int, num_tokens: int) -> float:
        """Measured over fitted seconds at the nearest measured batch size at or below `batch_size`
        (the smallest measured above it, below the grid), linear between its measured widths and
        held beyond them; 1 without prices."""
        if not self.prices:
            return 1.0
        batches, rows = self._price_rows
        batch = batches[max(0, bisect.bisect_right(batches, batch_size) - 1)]
        widths, ratios = rows[batch]
        return float(np.interp(num_tokens, widths, ratios))

    @cached_property
    def _price_rows(self) -> tuple[list[int], dict[int, tuple[list[int], list[float]]]]:
        """`prices` by batch size, once: (measured batch sizes ascending, batch -> (widths, ratios));
        every forward a policy prices reads it."""
        rows: dict[int, tuple[list[int], list[float]]] = {}
        for b, n, r in self.prices:  # sorted by batch, then width
            widths, ratios = rows.setdefault(b, ([], []))
            widths.append(n)
            ratios.append(r)
        return sorted(rows), rows

    def with_prices(self, samples: Sequence[LatencySample]) -> "CostModel":
        """This fit with `prices` taken from the samples it was fitted to."""
        bare = CostModel(**{**asdict(self), "prices": ()})
        ratios: dict[tuple[int, int], list[float]] = {}
        for s in samples:
            fitted = bare.forward_seconds(s.batch_size, s.num_tokens, s.context_length)
            ratios.setdefault((s.batch_size, s.num_tokens), []).append(s.seconds / fitted)
        prices = tuple((b, n, float(np.median(r))) for (b, n), r in sorted(ratios.items()))
        return CostModel(**{**asdict(self), "prices": prices})

    def draft_seconds(self, batch_size: int, draft_length: int) -> float:
        """A draft model proposes sequentially: k forwards at batch b."""
        return draft_length * (self.draft_base + self.draft_row * batch_size) if draft_length else 0.0

    def step_seconds(self, batch_size: int, draft_length: int, context_length: float = 0.0) -> float:
        """Draft then verify, every row padded to `draft_length`."""
        return self.draft_seconds(batch_size, draft_length) + self.forward_seconds(
            batch_size, draft_length + 1, context_length
        )

    def verify_affine(self, num_tokens: int, context_length: float = 0.0) -> Affine:
        """SpecActor's V(b) for one width: the same model read as affine in the batch size."""
        row = self.c_row + self.c_row_ctx * context_length
        return Affine(self.c_base, row + num_tokens * (self.c_tok + self.c_ctx * context_length))

    @property
    def draft_affine(self) -> Affine:
        return Affine(self.draft_base, self.draft_row)

    @property
    def has_draft_model(self) -> bool:
        """Whether the fit holds a measured draft model's cost D(b)."""
        return self.draft_base > 0 or self.draft_row > 0

    def with_draft(self, draft: Affine) -> "CostModel":
        return CostModel(**{**asdict(self), "draft_base": draft.intercept, "draft_row": draft.slope})

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        """A saved fit. One saved before fits recorded their device has no `device`: every such
        profile was measured on a CPU, so it loads as a CPU's."""
        return cls(**{"device": "cpu", **json.loads(Path(path).read_text())})


def check_profile_device(model: CostModel, device: str, path: str | Path) -> None:
    """Refuse the profile at `path` for a rollout on `device` if it was measured on another device type."""
    if model.device != device:
        raise ValueError(
            f"cost model {path} was measured on {model.device}, but this rollout runs on {device}: a "
            f"profile prices forwards only on the device it was measured on (write one with "
            f"`specroll profile --model MODEL --device {device}`)"
        )


def speedup(model: CostModel, alpha: float, k: int, batch_size: int, context_length: float = 0.0) -> float:
    """Tokens per second with a k-token draft for every row, over plain decoding's."""
    plain = model.forward_seconds(batch_size, 1, context_length)
    return expected_tokens(alpha, k) * plain / model.step_seconds(batch_size, k, context_length)


def best_draft_length(
    model: CostModel, alpha: float, batch_size: int, max_draft: int, context_length: float = 0.0
) -> int:
    """The k in 0..max_draft with the highest tokens per second for a uniform batch (0 on ties)."""
    return max(range(max_draft + 1), key=lambda k: (speedup(model, alpha, k, batch_size, context_length), -k))


# ----- fitting

_FEATURES = ("c_base", "c_tok", "c_ctx", "c_row", "c_row_ctx")


def _design(samples: Sequence[LatencySample]) -> np.ndarray:
    rows = [
        (
            1.0,
            s.batch_size * s.num_tokens,
            s.batch_size * s.num_tokens * s.context_length,
            s.batch_size,
            s.batch_size * s.context_length,
        )
        for s in samples
    ]
    return np.asarray(rows, dtype=np.float64)  # (num_samples, 5), columns in _FEATURES order


def _nonnegative_least_squares(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares, dropping any feature whose coefficient comes out negative and refitting."""
    active = list(range(X.shape[1]))
    while True:
        coef = np.zeros(X.shape[1])
        coef[active] = np.linalg.lstsq(X[:, active], y, rcond=None)[0]
        negative = [i for i in active if coef[i] < 0]
        if not negative:
            return coef
        active.remove(min(negative, key=lambda i: coef[i]))


def fit(samples: Sequence[LatencySample], source: str = "") -> CostModel:
    """Least-squares fit of DAS eq. 1 (with the context term), weighted by 1/t so that every sample's
    relative error counts alike: small batches are as important to policies as large ones; then the
    grid's `prices`. `fit_error` is the fit's own, before the prices correct it."""
    if len(samples) < len(_FEATURES):
        raise ValueError(f"need at least {len(_FEATURES)} samples to fit, got {len(samples)}")
    y = np.asarray([s.seconds for s in samples])
    X = _design(samples)
    coef = _nonnegative_least_squares(X / y[:, None], np.ones_like(y))
    if coef[0] + coef[1] <= 0:  # noisy timings put every second on row and context terms: the per-forward
        coef = np.zeros(len(_FEATURES))  # and per-token terms alone then (positive, as every timing is)
        coef[:2] = _nonnegative_least_squares(X[:, :2] / y[:, None], np.ones_like(y))
    model = CostModel(**dict(zip(_FEATURES, map(float, coef))), source=source)
    fitted = CostModel(**{**asdict(model), "fit_error": mean_relative_error(model, samples)})
    return fitted.with_prices(samples)


def fit_affine(xs: Sequence[float], ys: Sequence[float]) -> Affine:
    """Least squares y = a + b x with both coefficients kept >= 0 (used for D(b))."""
    X = np.stack([np.ones(len(xs)), np.asarray(xs, dtype=np.float64)], axis=1)
    y = np.asarray(ys, dtype=np.float64)
    a, b = _nonnegative_least_squares(X / y[:, None], np.ones_like(y))
    return Affine(float(a), float(b))


def mean_relative_error(model: CostModel, samples: Sequence[LatencySample]) -> float:
    errors = [
        abs(model.forward_seconds(s.batch_size, s.num_tokens, s.context_length) - s.seconds) / s.seconds
        for s in samples
    ]
    return float(np.mean(errors))


# Measured with `specroll profile` (median of 7, one torch thread) on a random Qwen2 of hidden 128,
# 4 layers, vocabulary 1024, and a draft model of hidden 64, 2 layers; 2-core CPU, 24 GiB, shared;
# 2026-11-22. The CPU shape: a forward costs ~1.6 ms plus ~0.11 ms per token, so 9-token rows cost
# 1.5x a one-token forward at batch 1 and ~7x at batch 64. See docs/policies.md.
# The default carries no drafting cost: model-free drafters cost next to nothing; a profile taken
# with `--draft-model` carries the draft model's D(b).
DEFAULT_COST_MODEL = CostModel(
    c_base=1.590e-3,
    c_tok=1.071e-4,
    c_ctx=0.0,
    fit_error=0.283,
    source="qwen2 h128 l4 (random), 2-core CPU, shared, 2026-11-22",
)
DEFAULT_DRAFT_MODEL_COST = Affine(7.05e-4, 2.90e-5)  # D(b) of the draft model above, per draft token
