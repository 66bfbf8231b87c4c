"""specroll: lossless speculative decoding for the rollout phase of RL post-training."""

from specroll import cpu_env

# Before torch loads or computes: MKL's GEMMs in strict reproducible mode on its AVX2 branch and
# ATen's kernels at AVX2, so that a row's bits depend neither on the thread count, the buffers'
# alignment nor whether the CPU has AVX-512; OpenMP's idle threads spinning briefly (`specroll.cpu_env`).
cpu_env.pin()

__version__ = "0.1.0"
