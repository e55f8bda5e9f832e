"""A step of an episode's history as a family's request shows it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    """One earlier step as a family's history shows it: the screen it acted on, the model's own words."""

    screenshot: str
    output: str
