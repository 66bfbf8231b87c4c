"""The inverse-CDF kernel: the token torch's float64 running sum and search give, to the bit, on rows
that end exactly at a boundary, hold zeros, or round u to the total's top; and `sample_from` uses it."""

from __future__ import annotations

import pytest
import torch

from specroll import sampling
from specroll.cpu_kernels import ops


def _torch_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = probs.double().cumsum(-1)
    target = u.double() * cdf[:, -1]
    return torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernels_draws_are_torchs_running_sum_and_search(dtype):
    g = torch.Generator().manual_seed(3)
    for trial in range(60):
        n, v = int(torch.randint(1, 20, (1,), generator=g)), int(torch.randint(1, 2_500, (1,), generator=g))
        probs = torch.softmax(torch.randn(n, v, generator=g) * float(1 + 15 * torch.rand(1, generator=g)), -1)
        if trial % 3 == 0:
            probs[:, ::5] = 0.0  # zero-probability tokens are never drawn, even at a boundary
        u = torch.rand(n, generator=g, dtype=torch.float64)
        if trial % 2 == 0:  # u exactly at a running sum: the search takes the next token (right=True)
            cdf = probs.to(dtype).double().cumsum(-1)
            at = torch.randint(0, v, (n,), generator=g)
            u = cdf[torch.arange(n), at] / cdf[:, -1]
        if trial % 7 == 0:
            u[0] = 1.0  # at the total: no running sum exceeds it, the last token (clamped)
        probs = probs.to(dtype)
        assert torch.equal(ops.inverse_cdf(probs, u), _torch_draw(probs, u)), trial


def test_rows_are_drawn_alone_and_the_sampler_uses_the_kernel(monkeypatch):
    g = torch.Generator().manual_seed(4)
    probs = torch.softmax(torch.randn(19, 49_152, generator=g) * 3, -1)  # a real vocabulary's width
    u = torch.rand(19, generator=g)
    tokens = ops.inverse_cdf(probs, u)
    assert torch.equal(tokens, _torch_draw(probs, u))
    for i in (0, 7, 8, 18):  # rows summed side by side in groups of 8: any row alone, the same token
        assert torch.equal(ops.inverse_cdf(probs[i : i + 1], u[i : i + 1]), tokens[i : i + 1])
    called = []
    monkeypatch.setattr(ops, "inverse_cdf", lambda p, w: called.append(1) or _torch_draw(p, w))
    assert torch.equal(sampling.sample_from(probs, u), tokens) and called


def test_bad_shapes_are_refused():
    with pytest.raises(RuntimeError, match="u must be"):
        ops.inverse_cdf(torch.ones(3, 4), torch.ones(2))
    with pytest.raises(RuntimeError, match="float32 or float64"):
        ops.inverse_cdf(torch.ones(3, 4, dtype=torch.bfloat16), torch.ones(3))
