"""Agreement of a binary predictor with the truth, as the calibration and annotation reports print it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class ChannelStats:
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn

    def add(self, predicted: bool, actual: bool, count: int = 1) -> None:
        cell = ("tp" if actual else "fp") if predicted else ("fn" if actual else "tn")
        setattr(self, cell, getattr(self, cell) + count)

    def remove(self, predicted: bool, actual: bool) -> None:
        """Take back one `add` (leave one item out)."""
        self.add(predicted, actual, -1)

    @classmethod
    def pooled(cls, summaries: Iterable[Mapping[str, Any] | None]) -> ChannelStats:
        """The counts of several `summary()`s added up (a missing one adds nothing)."""
        given = list(summaries)  # read once per count: a generator would be spent after the first
        return cls(*(sum(int((st or {}).get(k, 0)) for st in given) for k in ("tp", "fp", "tn", "fn")))

    def kappa(self) -> float | None:
        """Cohen's kappa: agreement with the anchor beyond what the two base rates give by chance;
        None (undefined) when chance explains all agreement, as when the anchor and the predictor
        both saw one class only (a task with no success is not "κ = 1")."""
        n = self.n
        if not n:
            return None
        chance = (
            (self.tp + self.fp) * (self.tp + self.fn) + (self.tn + self.fn) * (self.tn + self.fp)
        ) / n**2
        return ((self.tp + self.tn) / n - chance) / (1 - chance) if chance < 1 else None

    def summary(self) -> dict[str, Any]:
        n = self.n
        return {
            "n": n,
            "accuracy": (self.tp + self.tn) / n if n else 0.0,
            "precision": self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0,
            "recall": self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0,
            "kappa": self.kappa(),
            "tp": self.tp,
            "fp": self.fp,
            "tn": self.tn,
            "fn": self.fn,
        }


def channel_row(name: str, st: dict[str, Any], width: int = 24) -> str:
    """One `ChannelStats.summary()` as a table row: name, n, accuracy, precision, recall."""
    return (
        f"{name:{width}} {st['n']:4}  {st['accuracy']:8.1%}  {rate_text(st, 'precision'):>9}  "
        f"{rate_text(st, 'recall'):>6}"
    )


def rate_text(st: Mapping[str, Any], rate: str, digits: int = 1) -> str:
    """A summary's precision or recall as printed, or "-" where it is undefined: precision of a
    predictor that never said success, recall where the truth has no success (not "0.0%")."""
    misses = "fp" if rate == "precision" else "fn"
    if not st.get("tp", 0) + st.get(misses, 0):
        return "-"
    return f"{st[rate]:.{digits}%}"


def kappa_text(kappa: float | None) -> str:
    """A kappa as printed: two decimals, or "undefined" (one class only, or no item)."""
    return "undefined" if kappa is None else f"{kappa:.2f}"


Z95 = 1.959964


def wilson(right: int, n: int, z: float = Z95) -> list[float] | None:
    """The Wilson score interval of `right` of `n` (None when n is 0)."""
    if n <= 0:
        return None
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]
