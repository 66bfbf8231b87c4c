"""Fastest-of-N never copies, or runs again, a request that has finished (issue 38).

Under DAPO-32B-20K at seed 6 a copy preempted on KV overflow went back to its worker's queue; its
request finished elsewhere, the queue ran it again, and Fastest-of-N copied it without end (the
clock passed 3,500 s with over 100,000 copies).
"""

import signal

import numpy as np
import pytest

from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, simulate

MAX_WALL_SECONDS = 300  # the guarded run takes about 20 s on a shared 2-core CPU


@pytest.fixture
def wall_clock_limit():
    """Fail instead of hanging when the runaway comes back (signal.alarm: POSIX)."""

    def _fail(signum, frame):
        raise TimeoutError("Fastest-of-N did not terminate")

    previous = signal.signal(signal.SIGALRM, _fail)
    signal.alarm(MAX_WALL_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_dapo_seed_6_terminates_with_a_sane_speedup(wall_clock_limit):
    preset = get_preset("DAPO-32B-20K").with_overrides(seed=6)  # what `simulate --seed 6` runs
    verl, _ = simulate(preset, SYSTEMS["verl"])
    specactor, trace = simulate(preset, SYSTEMS["specactor"])
    assert not np.isnan(trace.finish_seconds).any()
    assert (trace.generated > 0).all()
    assert specactor.makespan_seconds < verl.makespan_seconds  # the runaway passed 3,500 s against 815 s
    assert 1.1 < verl.makespan_seconds / specactor.makespan_seconds < 1.6  # 1.24x when the guard came in
    assert specactor.num_fon_copies < preset.num_requests // 2  # 2,236 then; the runaway made 100,000+
