"""Replaying a forward as a CUDA graph: the kernels one call launches, recorded once per shape and
launched again together, so a small model's decode step costs its kernels' time, not Python's and the
driver's launch time (the GPU issue reports, for a plain-PyTorch forward of SmolLM2's shape on an
H100: 9-16 ms eager at any batch, 1.70 ms captured at batch 64; specroll's recorded verification step
of SmolLM2's shape in bf16 took 5.2 ms at batch 64 on an H100, and plain decoding ran 8-10x its eager
forwards there: BENCHMARKS.md, "On an H100").

A recorded graph reads and writes fixed addresses: the function it records must take its inputs from
buffers that outlive it (the caller copies each call's values in first), allocate nothing it keeps
outside the graph's pool, and never read a device value on the host. `Replayer` runs the same
function eagerly where the device has no graphs (the CPU), so every other line of the path is shared.
Its output may be a tensor or a tuple of tensors: a replay rewrites them in place.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Hashable

import torch

Run = Callable[[], Any]  # returns a tensor or a tuple of tensors


class Replayer:
    """run(key, fn): fn's output. On CUDA, fn runs eagerly the first `min_uses - 1` times `key` is
    seen, is recorded at its `min_uses`-th (after one warm-up call) and replayed from then on: a shape
    met once (a batch shrinking through its tail meets many) costs no recording. All graphs share one
    memory pool, as they run one at a time."""

    def __init__(self, device: torch.device, min_uses: int = 2) -> None:
        if min_uses < 1:
            raise ValueError(f"min_uses must be >= 1, got {min_uses}")
        self.is_capturing = device.type == "cuda"
        self.min_uses = min_uses
        self.uses: dict[Hashable, int] = {}
        self.graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, Any]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.is_capturing else None
        self.recording_seconds = 0.0  # spent recording graphs (warm-up and capture), device included

    def run(self, key: Hashable, fn: Run) -> Any:
        if not self.is_capturing:
            return fn()
        if key not in self.graphs:
            self.uses[key] = self.uses.get(key, 0) + 1
            if self.uses[key] < self.min_uses:
                return fn()
            started = time.perf_counter()
            self.graphs[key] = self._capture(fn)
            self.recording_seconds += time.perf_counter() - started
        graph, output = self.graphs[key]
        graph.replay()
        return output

    @property
    def num_graphs(self) -> int:
        return len(self.graphs)

    def _capture(self, fn: Run) -> tuple[torch.cuda.CUDAGraph, Any]:
        """(graph, output): fn recorded, its output the tensors each replay rewrites; returns once the
        device has finished (so the time spent is the recording's)."""
        # the warm-up runs on a side stream, as capture requires: lazy initialisation (cuBLAS
        # workspaces, autotuned kernels) happens there and not inside the recording
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread-local: another thread's CUDA work during the recording (the online head's spot
        # trainer runs beside the engine) is not an error of this capture
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            output = fn()
        torch.cuda.synchronize()
        return graph, output
