"""Progress of a long step as lines, where a bar cannot be drawn.

On a terminal a bar redraws in place; written to a file or a pipe (a log, CI, `nohup`), a redrawn bar
shows nothing until the end. `ProgressLines` prints one full line every `interval` seconds there (on a
terminal it rewrites one line), so a log shows a step's progress while it runs. Where one unit of work
can outlast the interval (a chunk of a coupling measurement: a minute on one slow core), `kept_alive()`
repeats the last line, its time brought up to date, every interval that brought none.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO

INTERVAL_ENV = "SPECROLL_PROGRESS_SECONDS"  # seconds between lines off a terminal (default 30)


def progress_interval() -> float:
    return float(os.environ.get(INTERVAL_ENV) or 30.0)


class ProgressLines:
    """progress(done, total, detail=""): `label: done/total unit, elapsed[, detail]` at most once an
    interval, and always at the end; `close()` ends a line left open on a terminal by a step that
    stopped before its total (a training ended by its epochs, not its minutes)."""

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.label, self.unit, self.clock = label, unit, clock
        self.stream = stream or sys.stderr
        self.is_terminal = self.stream.isatty()
        self.interval = (1.0 if self.is_terminal else progress_interval()) if interval is None else interval
        self.started = clock()
        self.last = float("-inf")
        self.has_ended = False  # the line of done == total is printed once
        self.is_open = False  # a terminal line is written without its newline yet
        self.state: tuple[int, int, str] | None = None  # the last call's (done, total, detail)
        self.lock = threading.Lock()  # `kept_alive`'s thread writes too

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        with self.lock:
            self.state = (done, total, detail)
            now = self.clock()
            if (now - self.last < self.interval and done < total) or (done >= total and self.has_ended):
                return
            self._write(now, done, total, detail)

    def _write(self, now: float, done: int, total: int, detail: str) -> None:
        self.last, self.has_ended = now, done >= total
        line = f"{self.label}: {done}/{total} {self.unit}, {now - self.started:.0f} s"
        line += f", {detail}" if detail else ""
        self.is_open = self.is_terminal and done < total
        self.stream.write(("\r" if self.is_terminal else "") + line + ("" if self.is_open else "\n"))
        self.stream.flush()

    def _repeat(self) -> None:
        """The last line again, with the time now, if the interval passed without one."""
        with self.lock:
            now = self.clock()
            if self.state is not None and not self.has_ended and now - self.last >= self.interval:
                self._write(now, *self.state)

    @contextmanager
    def kept_alive(self) -> Iterator["ProgressLines"]:
        """Inside: once the first call came, a line every interval (checked every second, or every
        interval where that is shorter), however long the work between two calls; an interval of 0
        (a line at every call) repeats none."""
        stop = threading.Event()

        def beat() -> None:
            while self.interval > 0 and not stop.wait(min(1.0, self.interval)):
                self._repeat()

        thread = threading.Thread(target=beat, name=f"{self.label} progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    def close(self) -> None:
        with self.lock:
            if self.is_open:
                self.stream.write("\n")
                self.stream.flush()
                self.is_open = False


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """`--no-progress`, for a command that shows its progress while it runs for minutes."""
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines or bars")
