"""Discrete-event simulator of one synchronous rollout step over many workers; torch-free.

cost_model   per-forward latency from the roofline, or a fitted affine model
workload     per-request output lengths (long-tailed, correlated within a group) or a trace
acceptance   per-request, per-drafter acceptance probabilities
speculation  how a worker's batch turns into tokens per iteration and iteration latency
worker       one worker's running batch, advanced in closed form between events
loop         the heap-based event loop: dispatch, finish, chunk end, preemption, Fastest-of-N
systems      the compared systems as compositions of dispatch, order and speculation options
metrics      makespan, output tokens per second, tail time, idle GPU fraction
presets      the papers' set-ups, every assumption cited
reproduce    the headline comparisons beside the papers' ranges
"""
