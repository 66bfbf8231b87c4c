"""specroll's CPU kernels: bf16 linear layers, attention, RMSNorm and SiLU(gate) * up in C++ with
AVX-512, each output one fixed sequence of fp32 operations over its own row's inputs.

Every row's bits are so a function of the row alone: not of the other rows, the call's row count,
the read length, the drafts beside it, the threads or the CPU model, since no kernel chooses an
order by shape and every instruction used is defined to the bit (VDPBF16PS where the CPU's agrees
with its definition, `probe`, else that definition in AVX-512F). The exact forward needs no probe of
a library's kernels, no padding of calls to probed row counts, and no fp32 copy of the cache.

Built on first use (`build`); `ops` holds the functions the model calls.
"""
