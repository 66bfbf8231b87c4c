"""Drafters: strategy objects behind one protocol (`specroll.drafting.protocol`)."""
