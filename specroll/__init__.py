"""specroll: lossless speculative decoding for the rollout phase of RL post-training."""

from specroll import cpu_numerics

# Before any tensor operation of the process: MKL's GEMMs in strict reproducible mode on its AVX2
# branch and ATen's kernels at AVX2, so that a row's bits depend neither on the thread count, the
# buffers' alignment nor whether the CPU has AVX-512 (`specroll.cpu_numerics`).
cpu_numerics.pin()

__version__ = "0.1.0"
