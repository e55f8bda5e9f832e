"""The self-evolving loop: round steps, policy versions, the trainer hook, round reports."""
