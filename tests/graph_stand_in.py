"""A stand-in for CUDA graph recording on the CPU, with a graph's semantics: a replay runs the
function as it was recorded (its closure, not the caller's new one) and writes the results into the
output tensors of the recording. A step whose inputs do not come from buffers that outlive the
recording reads stale inputs here, as it would on a GPU; only the kernels' launch is not emulated."""

from __future__ import annotations

import torch

from specroll.model.cuda_graphs import Replayer


class ReplayedOnCpu(Replayer):
    def __init__(self, min_uses: int = 2) -> None:
        super().__init__(torch.device("cpu"), min_uses)
        self.is_capturing = True  # take the recording path
        self.num_replays = 0

    def _capture(self, fn):
        fn()  # the warm-up call
        recorded = _Recorded(fn, fn(), self)
        return recorded, recorded.output


class _Recorded:
    def __init__(self, fn, output, owner: ReplayedOnCpu) -> None:
        self.fn, self.output, self.owner = fn, output, owner

    def replay(self) -> None:
        self.owner.num_replays += 1
        fresh = self.fn()
        outputs = self.output if isinstance(self.output, tuple) else (self.output,)
        for out, new in zip(outputs, fresh if isinstance(fresh, tuple) else (fresh,)):
            out.copy_(new)
