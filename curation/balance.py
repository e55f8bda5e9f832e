"""Balancing a round's samples (GUI-Owl §2.2.3), deterministic for a seed.

- Task re-weighting: samples of a task whose success rate is above `high_pass_rate` are
  down-sampled to `downsample_keep`; those of a task below `low_pass_rate` (but solved at
  least once) get weight `upsample_weight` (repetitions in training).
- Critic-style data: positive and negative samples of a judging category (self-reflection
  GOOD vs HARMFUL, state verification yes vs no) are re-balanced to equal size.
- Category mix: with `category_weights`, over-represented categories are down-sampled
  to the target shares.

Each decision picks samples by a hash of (seed, uid), so a rerun decides the same way,
and each drop carries its reason code.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trajforge.logs import counts

if TYPE_CHECKING:
    from trajforge.settings import CurationSettings

TASK_DOWNSAMPLED = "task_downsampled"
CLASS_BALANCE = "class_balance"
CATEGORY_MIX = "category_mix"
REASONS = (TASK_DOWNSAMPLED, CLASS_BALANCE, CATEGORY_MIX)


@dataclass(frozen=True)
class Item:
    uid: str
    category: str
    query: str | None
    response: str
    label: bool | None = None  # the sample's structured polarity (payload `polarity`), when it has one


@dataclass
class BalanceReport:
    dropped: Counter[str] = field(default_factory=Counter)
    upweighted: int = 0
    composition: Counter[str] = field(default_factory=Counter)  # kept samples per category
    weight: dict[str, float] = field(default_factory=dict)  # total weight per category
    unbalanced: list[str] = field(default_factory=list)  # judging categories with one class only

    def render(self) -> str:
        total = sum(self.composition.values()) or 1
        mix = ", ".join(
            f"{c}={n} ({n / total:.0%}, weight {self.weight[c]:g})"
            for c, n in sorted(self.composition.items())
        )
        drops = counts(self.dropped)
        return f"balance: dropped {drops}; {self.upweighted} up-weighted\ncomposition: {mix}"


def polarity(item: Item) -> bool | None:
    """True for a positive judging sample, False for a negative one, None otherwise: the structured
    label the sample was derived from, so a model's wording never moves it; samples stored before
    the label existed are read from the template's wording."""
    if item.category not in ("self_reflection", "state_verification"):
        return None
    if item.label is not None:
        return item.label
    if item.category == "self_reflection":
        label = item.response.split(":", 1)[0].strip()
        return {"GOOD": True, "HARMFUL": False}.get(label)
    if item.category == "state_verification":
        return {"yes": True, "no": False}.get(item.response.strip().lower())
    return None


def _rank(seed: int, uid: str) -> float:
    return int(hashlib.sha256(f"{seed}:{uid}".encode()).hexdigest()[:13], 16) / 16**13


def balance(
    items: list[Item], pass_rates: dict[str, float], settings: CurationSettings
) -> tuple[dict[str, tuple[str | None, float]], BalanceReport]:
    """{uid: (drop reason or None, weight)} and the report."""
    report = BalanceReport()
    decided: dict[str, tuple[str | None, float]] = {}
    live = []
    for item in items:
        rate = pass_rates.get(item.query or "")
        weight = 1.0
        if rate is not None and rate > settings.high_pass_rate:
            if _rank(settings.seed, item.uid) >= settings.downsample_keep:
                decided[item.uid] = (TASK_DOWNSAMPLED, 1.0)
                continue
        elif rate is not None and 0 < rate < settings.low_pass_rate:
            weight = settings.upsample_weight
            report.upweighted += 1
        decided[item.uid] = (None, weight)
        live.append(item)

    def drop(pool: list[Item], keep: int, reason: str) -> None:
        for item in sorted(pool, key=lambda i: _rank(settings.seed, i.uid))[keep:]:
            decided[item.uid] = (reason, 1.0)

    for category in ("self_reflection", "state_verification"):
        pos = [i for i in live if i.category == category and polarity(i) is True]
        neg = [i for i in live if i.category == category and polarity(i) is False]
        if pos and neg:
            drop(pos if len(pos) > len(neg) else neg, min(len(pos), len(neg)), CLASS_BALANCE)
        elif pos or neg:
            report.unbalanced.append(category)
    live = [i for i in live if decided[i.uid][0] is None]

    shares = {c: w for c, w in settings.category_weights.items() if w > 0}
    if shares:
        total = sum(shares.values())
        present = Counter(i.category for i in live if i.category in shares)
        scale = min((present[c] / (w / total) for c, w in shares.items()), default=0.0)
        for c, w in shares.items():
            drop([i for i in live if i.category == c], math.floor(scale * w / total + 1e-9), CATEGORY_MIX)

    for item in items:
        reason, weight = decided[item.uid]
        if reason:
            report.dropped[reason] += 1
        else:
            report.composition[item.category] += 1
            report.weight[item.category] = report.weight.get(item.category, 0.0) + weight
    return decided, report
