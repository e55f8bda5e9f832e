"""What the knn policy reads in the task's words: tokens, the controls a task names, typed text,
and how far the actions taken so far have covered the instruction.

It reads only the instruction and the element tree an agent sees (texts, kinds), never the
simulator's state, so it works the same on the web and android backends.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from trajforge.text import cjk, quoted, words

TASK_PREFIX = "Task: "
CONTROLS = ("button", "toggle")  # what a task can name and a tap uses
HALF_NAMED = 0.5  # a control counts as named from this share of its words up
_PUNCT = ",.'\""


def instruction_of(prompt: str) -> str:
    """The task line of an action prompt ("Task: ...\\nHistory: ...")."""
    first = prompt.split("\n", 1)[0]
    return first[len(TASK_PREFIX) :] if first.startswith(TASK_PREFIX) else first


def label(element: dict[str, Any]) -> str:
    return str(element.get("text") or "").casefold()


def shared(elements: Iterable[dict[str, Any]]) -> frozenset[str]:
    """Words more than one element on the screen shows ("Color" of "Color: White", "Color: Blue")."""
    counts = Counter(w for e in elements for w in set(words(label(e))))
    return frozenset(w for w, n in counts.items() if n > 1)


def named(element: dict[str, Any], instruction: set[str], common: frozenset[str] = frozenset()) -> float:
    """Share of the element's words that the instruction says; of the words that set it apart from
    the others on its screen (`common`: `shared`), when it has any."""
    mine = set(words(label(element)))
    mine = (mine - common) or mine
    return len(mine & instruction) / len(mine) if mine else 0.0


def said(element: dict[str, Any], instruction: set[str], common: frozenset[str] = frozenset()) -> float:
    """How far the task names this control (0: not): all its words, or at least half of them. CJK
    text only whole, as its tokens are characters (half of "专车" is in "快车"); a list row only
    whole, as the row the task names may be further down ("Taco Town" for "Fish Taco from ...")."""
    if element.get("kind") not in (*CONTROLS, "list_item", "input"):
        return 0.0
    share = named(element, instruction, common)
    whole = cjk(label(element)) or element.get("kind") == "list_item"  # a row may be further down
    return share if share == 1.0 or (share >= HALF_NAMED and not whole) else 0.0


def copy_span(typed: str, source: str, target: str) -> str:
    """The text at the same place of `target` as `typed` sits in `source`: after the same word, up
    to the word that followed it there ("for running shoes and" -> "for noise cancelling headphones
    and"), else as many words."""
    src, dst = source.split(), [w.casefold().strip(_PUNCT) for w in target.split()]
    n = max(1, len(typed.split()))
    for i in range(len(src) - n + 1):
        if " ".join(src[i : i + n]).strip(_PUNCT).casefold() == typed.casefold() and i > 0:
            before = src[i - 1].casefold().strip(_PUNCT)
            after = src[i + n].casefold().strip(_PUNCT) if i + n < len(src) else None
            for j in range(1, len(dst)):
                if dst[j - 1] == before:
                    end = next((k for k in range(j + 1, len(dst)) if dst[k] == after), j + n)
                    return " ".join(target.split()[j:end]).strip(_PUNCT)
    return typed


class Rarity:
    """Words weighted by how rare they are among the distinct instructions (inverse document
    frequency): "screen timeout" tells tasks apart, "set the ... to" does not."""

    def __init__(self, instructions: Iterable[str]) -> None:
        distinct = {frozenset(words(i)) for i in instructions}
        self.df = Counter(w for i in distinct for w in i)
        self.n = len(distinct)

    def weight(self, word: str) -> float:
        return math.log((self.n + 1) / (self.df[word] + 1)) + 1.0

    def overlap(self, a: set[str], b: set[str]) -> float:
        """Weighted Jaccard: the weight of the shared words over the weight of all."""
        union = sum(self.weight(w) for w in a | b)
        return sum(self.weight(w) for w in a & b) / union if union else 0.0


class Coverage:
    """Which of the instruction's words the episode's actions have acted on.

    A tap on a control the task names covers its words (the policy passes only those), typing
    the words typed. The task reads as done
    when the last action covered the furthest-covered word, at most `TRAILING` words of the
    instruction after it are still uncovered (a toggle's "off"), and every instruction word seen on
    a control during the episode has been acted on. On "Open Settings, then open Display, then
    open Brightness level" that is the tap on "Brightness level"; on "... then choose Ripple" it is
    not yet, two words trail.
    """

    TRAILING = 1

    def __init__(self, instruction: str) -> None:
        self.tokens = words(instruction)
        self.vocab = set(self.tokens)
        self.values = [set(words(v)) for v in quoted(instruction) if words(v)]
        self.covered: set[str] = set()
        self.seen: set[str] = set()  # instruction words a control on some screen showed
        self._last: set[str] = set()  # words the last action covered

    def see(self, elements: list[dict[str, Any]]) -> None:
        common = shared(elements)
        for e in elements:
            if said(e, self.vocab, common) == 1.0:
                self.seen |= set(words(label(e))) & self.vocab

    def position(self, element: dict[str, Any]) -> int:
        """Where the instruction first says one of the element's words (its length if nowhere)."""
        return self.first(set(words(label(element))))

    def first(self, mine: set[str]) -> int:
        return next((i for i, w in enumerate(self.tokens) if w in mine), len(self.tokens))

    def value_pending(self, before: int) -> bool:
        """A value the task quotes before token `before` has not been acted on yet ("press Submit"
        waits for the "Myron" that 'Enter "Myron" ... and press Submit' says first)."""
        return any(self.first(v) < before and not v <= self.covered for v in self.values)

    def spent(self, element: dict[str, Any]) -> bool:
        """Every task word the element shows was acted on already (GMT+8 after Singapore (GMT+8))."""
        return set(words(label(element))) & self.vocab <= self.covered

    def act(self, text: str) -> None:
        """An action on `text` (the tapped element's label, or the typed text)."""
        self._last = set(words(text)) & self.vocab
        self.covered |= self._last

    def done(self) -> bool:
        if not self._last or not self.seen <= self.covered:
            return False
        at = [i for i, w in enumerate(self.tokens) if w in self.covered]
        if self.tokens[at[-1]] not in self._last:
            return False
        trailing = {w for w in self.tokens[at[-1] + 1 :] if w not in self.covered}
        return len(trailing) <= self.TRAILING
