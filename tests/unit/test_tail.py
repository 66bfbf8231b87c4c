"""The one tail figure of a rollout step (`specroll.tail`), shared by rollouts and the simulator."""

import math

import numpy as np
import pytest

from specroll.tail import tail_seconds


def test_tail_literals():
    assert tail_seconds([10.0, 1, 2, 3, 4, 5, 6, 7, 8, 9]) == 1.0  # 10 requests: from the 9th finish
    assert tail_seconds([float(t) for t in range(1, 21)]) == 2.0  # 20 requests: from the 18th to the 20th
    assert tail_seconds([1.0, 5.0, 9.0], fraction=0.5) == 4.0  # one request of three is in the tail
    assert tail_seconds([3.0]) == 0.0 and tail_seconds([]) == 0.0
    with pytest.raises(ValueError):
        tail_seconds([1.0, 2.0], fraction=1.0)


@pytest.mark.parametrize("n", [1, 9, 10, 11, 99, 2048, 3200, 16384])
def test_the_ninetieth_percentile_is_the_ceil_09n_th_finish(n):
    """At least 90% of the requests have finished when the tail starts, and no earlier finish would do."""
    finish = np.random.default_rng(n).permutation(np.arange(1.0, n + 1))
    start = finish.max() - tail_seconds(finish)
    assert np.mean(finish <= start) >= 0.9
    assert start == math.ceil(0.9 * n)
