"""GRPO training whose rollouts go through the specroll engine (`specroll train`)."""
