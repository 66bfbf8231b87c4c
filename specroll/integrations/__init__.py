"""Bridges from RL trainers people already use to the specroll engine (`trl`: TRL's GRPOTrainer; `verl`:
a verl rollout backend, `rollout.name=specroll`)."""
