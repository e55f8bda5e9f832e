"""Environments, device pool, policies and the episode runner."""
