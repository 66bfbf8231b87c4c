"""specroll: lossless speculative decoding for the rollout phase of RL post-training."""

import os

# Before any matrix product of the process: MKL's strict reproducible mode, so that a CPU GEMM's bits
# do not depend on its thread count or its buffers' alignment (`specroll.model.blas_mode`).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

__version__ = "0.1.0"
