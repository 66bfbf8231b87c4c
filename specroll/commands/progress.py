"""Progress of a long step as lines, where a bar cannot be drawn.

On a terminal a bar redraws in place; written to a file or a pipe (a log, CI, `nohup`), a redrawn bar
shows nothing until the end. `ProgressLines` prints one full line every `interval` seconds there (on a
terminal it rewrites one line), so a log shows a step's progress while it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

INTERVAL_ENV = "SPECROLL_PROGRESS_SECONDS"  # seconds between lines off a terminal (default 30)


def progress_interval() -> float:
    return float(os.environ.get(INTERVAL_ENV) or 30.0)


class ProgressLines:
    """progress(done, total, detail=""): `label: done/total unit, elapsed[, detail]` at most once an
    interval, and always at the end."""

    def __init__(self, label: str, unit: str, stream: TextIO | None = None, interval: float | None = None):
        self.label, self.unit = label, unit
        self.stream = stream or sys.stderr
        self.is_terminal = self.stream.isatty()
        self.interval = (1.0 if self.is_terminal else progress_interval()) if interval is None else interval
        self.started = time.perf_counter()
        self.last = float("-inf")
        self.has_ended = False  # the line of done == total is printed once

    def __call__(self, done: int, total: int, detail: str = "") -> None:
        now = time.perf_counter()
        if (now - self.last < self.interval and done < total) or (done >= total and self.has_ended):
            return
        self.last, self.has_ended = now, done >= total
        line = f"{self.label}: {done}/{total} {self.unit}, {now - self.started:.0f} s"
        line += f", {detail}" if detail else ""
        end = "\n" if not self.is_terminal or done >= total else ""
        self.stream.write(("\r" if self.is_terminal else "") + line + end)
        self.stream.flush()


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """`--no-progress`, for a command that shows its progress while it runs for minutes."""
    parser.add_argument("--no-progress", action="store_true", help="print no progress lines or bars")
