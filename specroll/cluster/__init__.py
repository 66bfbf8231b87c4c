"""Rollout over many workers: a torch-free coordinator that owns the requests and decides where each
runs (`specroll.scheduling.dispatch`, shared with the simulator), and workers that each hold an
engine, as Ray actors (`ray_pool`) or in this process (`inline_pool`)."""
