"""What the random explorer does with a desktop's keyboard (docs/loop.md, exploration).

A desktop task is mostly typed, not tapped: a word into the focused document, the whole text
replaced, a save, a save under a new name and the dialog that asks for it. A mouse-only explorer
reaches none of that within a dozen steps (it would have to find File > Save As in a menu, then the
dialog's name field). So on a desktop the explorer also plays *moves*: short key sequences built
from the instruction's values and the shortcuts desktop apps share (GTK's and LibreOffice's):

- type a value into the focused window; all the quoted values one per line; a value then Return;
- select all (`ctrl+a`) and type a value over it;
- save (`ctrl+s`);
- save as (`ctrl+shift+s`), select the name the dialog proposes, type a file name, Return, when the
  task asks to save "as" something;
- Return on its own: the default button of a dialog that is showing.

What the explorer finds this way is a success like any other, so the trained policy (knn) learns the
keys and, through `copy_span`, types the next task's values.
"""

from __future__ import annotations

import re

from trajforge.actions import Action, ActionKind
from trajforge.text import quoted

KEYBOARD_SHARE = 0.5  # on a desktop, the share of the explorer's free steps that play a move
_SAVE_AS = re.compile(r"\bsave\b.*\bas\b", re.IGNORECASE)
_EDGE = ",;:!?\"'()"


def values(instruction: str) -> list[str]:
    """What a desktop task wants typed: its quoted values, else its words that hold a digit or name a
    file ("Put 42 in cell C2" -> 42, C2; "Save it as report.txt." -> report.txt)."""
    found = quoted(instruction)
    if found:
        return found
    tokens = [w.strip(_EDGE).rstrip(".") for w in instruction.split()]
    return [t for t in tokens if any(c.isdigit() for c in t) or re.fullmatch(r"[\w-]+\.\w+", t)]


def _key(keys: str) -> Action:
    return Action(kind=ActionKind.HOTKEY, text=keys)


def _type(text: str) -> Action:
    return Action(kind=ActionKind.TYPE, text=text)


ENTER = Action(kind=ActionKind.PRESS, key="enter")


def moves(instruction: str) -> list[list[Action]]:
    """The explorer's keyboard moves for this task, each a short sequence of actions."""
    found = values(instruction)
    out: list[list[Action]] = [[_key("ctrl+s")], [ENTER]]
    for value in found:
        out += [[_type(value)], [_key("ctrl+a"), _type(value)], [_type(value), ENTER]]
    if len(found) > 1:
        out.append([_type("\n".join(found))])
    if _SAVE_AS.search(instruction):
        names = [v for v in found if "." in v] or found
        out += [[_key("ctrl+shift+s"), _key("ctrl+a"), _type(name), ENTER] for name in names]
    return out
