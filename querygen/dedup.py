"""Query dedup within an app: exact text, and near-duplicates of the same task.

Two instructions are exact duplicates when they match after case folding and removing
punctuation and spaces. They are near-duplicates when they ask for the same goal and
share at least `threshold` of their character trigrams (Jaccard): paraphrases of one
task. Instructions that differ in a value ("2 Fries" vs "3 Fries") ask for different
goals and are never near-duplicates.
"""

from __future__ import annotations

import json
import unicodedata
from collections import defaultdict
from dataclasses import dataclass

from trajforge.world.verify import Goal

# 0.8: intent-template paraphrases of one goal in our apps overlap 0.35-0.7 in trigrams,
# while re-sampled identical templates reach 1.0; 0.8 drops only the near-identical.
NEAR_DUPLICATE_JACCARD = 0.8


def normalize(text: str) -> str:
    return "".join(ch for ch in text.casefold() if unicodedata.category(ch)[0] not in "PZSC")


def trigrams(text: str) -> frozenset[str]:
    norm = normalize(text)
    return frozenset(norm[i : i + 3] for i in range(max(1, len(norm) - 2)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def goal_key(goal: Goal) -> str:
    return json.dumps(goal.model_dump(), sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class Duplicate:
    reason: str  # duplicate_exact | duplicate_near
    of: str  # uid of the query it duplicates
    similarity: float


class QueryDeduper:
    """Remembers kept queries; `check` answers whether a new one duplicates one of them."""

    def __init__(self, threshold: float = NEAR_DUPLICATE_JACCARD) -> None:
        self.threshold = threshold
        self._exact: dict[str, str] = {}
        self._by_goal: dict[str, list[tuple[str, frozenset[str]]]] = defaultdict(list)

    @property
    def size(self) -> int:
        return len(self._exact)

    def find(self, text: str, goal: Goal) -> Duplicate | None:
        """The kept query this one duplicates, if any (nothing is remembered)."""
        norm = normalize(text)
        if norm in self._exact:
            return Duplicate("duplicate_exact", self._exact[norm], 1.0)
        grams = trigrams(text)
        for other, other_grams in self._by_goal[goal_key(goal)]:
            sim = jaccard(grams, other_grams)
            if sim >= self.threshold:
                return Duplicate("duplicate_near", other, round(sim, 4))
        return None

    def add(self, uid: str, text: str, goal: Goal) -> None:
        """Remember a kept query."""
        self._exact[normalize(text)] = uid
        self._by_goal[goal_key(goal)].append((uid, trigrams(text)))

    def check(self, uid: str, text: str, goal: Goal) -> Duplicate | None:
        """`find`, then `add` when it is new."""
        duplicate = self.find(text, goal)
        if duplicate is None:
            self.add(uid, text, goal)
        return duplicate
