"""Warnings about a valid app spec: what `apps validate` points out but does not refuse."""

from __future__ import annotations

from trajforge.appspec import AppSpec
from trajforge.spec_refs import SLOT_REF


def intent_warnings(spec: AppSpec) -> list[str]:
    """Intents that name a control in words but not the slot it sets: the goal checks only the
    slots an intent references, so a run that never touches that control still passes.

    E.g. `收藏{shop}` on a screen whose toggle `收藏` sets slot `favorite`: reaching the screen
    with the shop picked succeeds without tapping 收藏. The fix is to reference the slot.
    """
    out: list[str] = []
    for sid, screen in spec.screens.items():
        controls = [  # (words shown, where, slots it sets) of the controls on the intent's own screen,
            # the moves a path makes after it arrives, which only the slots can tell apart
            (
                SLOT_REF.sub("", w.label).strip(),
                f"screens.{sid}.{w.id}",
                ({w.slot} if w.slot else set()) | set(w.sets),
            )
            for w in screen.widgets
        ]
        controls = [(words, where, slots) for words, where, slots in controls if slots and len(words) >= 2]
        for intent in screen.intents:
            named, text = set(SLOT_REF.findall(intent)), SLOT_REF.sub(" ", intent).casefold()
            for words, where, slots in controls:
                unchecked = sorted(slots - named)
                if unchecked and words.casefold() in text:
                    out.append(
                        f"screens.{sid}.intents: {intent!r} names {words!r} ({where}) but not its slot "
                        f"{', '.join(unchecked)}, so the goal does not check it and a run that never "
                        f"taps it passes; reference {{{unchecked[0]}}} in the intent"
                    )
    return out
