"""How a task's words meet what the screens showed: the task's parts, the elements it names, the
state it asks of a switch, and the taps that commit or leave (the learned critic's vocabulary).

Nothing here names an app, a widget or a task: the matching reads only the instruction and
the element tree as the device reports it (`critics.view`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from critics.view import CriticView
from trajforge.domain import SeenElement
from trajforge.text import cjk, words

GENERIC = frozenset(
    [
        "a",
        "an",
        "and",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "the",
        "then",
        "this",
        "that",
        "to",
        "with",
        "you",
        "your",
    ]
)

# the words a task uses for an element of each role ("Focus into the textbox", "Click the link")
ROLE_WORDS = {
    "input": {"textbox", "field", "input", "box", "text"},
    "button": {"button", "btn"},
    "link": {"link"},
    "toggle": {"checkbox", "radio", "toggle", "switch", "box"},
    "tab": {"tab"},
    "option": {"option", "dropdown"},
    "list_item": {"item", "option", "row"},
}
# the words of a button that commits what the task set up ("Place order", "Submit", "确认呼叫"): a tap on
# one after the task's last part is finishing the task, not wandering off
_COMMIT = frozenset(
    [
        "ok",
        "okay",
        "done",
        "submit",
        "confirm",
        "apply",
        "save",
        "send",
        "place",
        "order",
        "pay",
        "buy",
        "checkout",
        "finish",
    ]
)
_COMMIT_CJK = ("确认", "确定", "提交", "下单", "完成", "保存")
_CLAUSE = re.compile(r"[,;，、。；]|\bthen\b|\band\b|\bwith\b")


def clause_texts(instruction: str) -> list[str]:
    """The task's parts in order, as text ("open sound", " then open ring volume")."""
    return [p for p in _CLAUSE.split(instruction.casefold()) if set(words(p)) - GENERIC]


def clauses(instruction: str) -> list[set[str]]:
    """The task's parts in order ("Open Sound, then open Ring volume"), each as its content words."""
    return [set(words(p)) - GENERIC for p in clause_texts(instruction)]


def part_acted(part: set[str], acted: set[str], essential: frozenset[str] = frozenset()) -> bool:
    """Half a part's words acted on, and every word of a value it quotes."""
    return len(part & acted) * 2 >= len(part) and part & essential <= acted


# verbs that ask for text to be typed ("Search for noise cancelling headphones", "Enter "Kasie" ...")
# and the fields whose value is always typed ("... with the password guest-pass")
_TYPE_VERBS = frozenset(["search", "find", "type", "enter", "password", "搜", "索", "输", "入", "密", "码"])


def untyped_parts(parts: Sequence[set[str]], typed: set[str]) -> float:
    """The share of the task's parts that ask for text to be typed and whose words (besides the verb
    and the field's role) were less than half typed."""
    roles = {w for ws in ROLE_WORDS.values() for w in ws}
    asking = [p - _TYPE_VERBS - roles for p in parts if p & _TYPE_VERBS]
    asking = [p for p in asking if p]
    return sum(len(p & typed) * 2 < len(p) for p in asking) / len(asking) if asking else 0.0


def touched_words(e: SeenElement, asked: set[str]) -> set[str]:
    """What a tap on `e` did in the task's words: its text, and its role where the task names one
    ("Focus into the textbox" is done by a tap on an empty input)."""
    return set(words(e.text)) | (ROLE_WORDS.get(e.role, set()) & asked)


_AWAY = ("back", "home")


def goes_away(action: dict[str, Any] | None) -> bool:
    """A press of back or home: leaving the screen rather than acting on it."""
    a = action or {}
    return a.get("kind") in _AWAY or (a.get("kind") == "press" and a.get("key") in _AWAY)


def is_commit(e: SeenElement) -> bool:
    """A button that commits what was set up ("Place order", "确认呼叫")."""
    return bool(set(words(e.text)) & _COMMIT) or any(w in e.text for w in _COMMIT_CJK)


def share(part: set[str], whole: set[str]) -> float:
    return len(part & whole) / len(whole) if whole else 0.0


def name_in_task(e: SeenElement, task: str, asked: set[str]) -> str | None:
    """The element's name when the task names it ("Black" for "Color: Black" in "... in Black"):
    CJK text by substring, other text by all its content words; else None."""
    text = re.split(r"[:：]", e.text.casefold())[-1].strip()
    if not text:  # an empty field the task names by its role ("Focus into the textbox")
        return f"<{e.role}>" if ROLE_WORDS.get(e.role, set()) & asked else None
    if cjk(text):
        return text if text in task else None
    mine = set(words(text)) - GENERIC
    return text if mine and mine <= asked else None


# words that ask for a switch off ("关" too: CJK text is a word per character)
_OFF = frozenset(["off", "disable", "uncheck", "deselect", "unselect", "clear", "关"])


def state_asked(name: str, parts: Sequence[str]) -> bool:
    """Whether the task wants the named switch or option on: off where the part naming it says so
    ("turn Wi-Fi off", "uncheck X"), on otherwise ("select X", "set the volume to 75%")."""
    part = next((p for p in parts if name.strip("<>") in p), "")
    return not set(words(part)) & _OFF


def texts(elements: Sequence[SeenElement]) -> set[str]:
    return {w for e in elements for w in words(e.text)}


def without_shown_task(view: CriticView) -> CriticView:
    """The view without the elements that show the task's own words (MiniWoB++ prints its
    instruction on the page): the instruction on a screen says nothing about progress."""
    task = " ".join(words(view.instruction))

    def own(e: SeenElement) -> bool:
        mine = " ".join(words(e.text))
        return bool(mine) and (
            task in mine or (mine in task and mine.count(" ") >= 3 and len(mine) >= 0.6 * len(task))
        )

    return CriticView(
        view.instruction,
        tuple(st.keeping(lambda e: not own(e)) for st in view.steps),
    )
