"""Offline replay evaluation of drafters on recorded rollouts (the protocol of Seer's Table 2)."""
