"""An exported action answer's notes: its thought and its intent (the action in words, GUI-Owl's
conclusion, Mobile-R1's `<action>`). The policy's own come first; the rest is written, and said so."""

from __future__ import annotations

from typing import Any

from trajforge.sample import target_action


def answer_notes(
    slots: tuple[str, ...], payload: dict[str, Any], asks: tuple[str, ...] | None = None
) -> tuple[dict[str, str | None], list[str]]:
    """An action answer's notes (thought, intent) for a format with these `slots`, and those of them
    the policy did not say. The policy's own words come first (`said`, recorded with the step), then
    what a stage wrote (a synthesised thought, the action in words). A family's answer holds exactly
    the notes its prompt `asks` for: a thought its prompt never mentions is left out."""
    said = payload.get("said") or {}
    kept = slots if asks is None else tuple(n for n in slots if n in asks)
    notes = {n: said.get(n) or payload.get(n) or None for n in kept}
    return notes, [n for n, v in notes.items() if v is not None and not said.get(n)]


def offline_thought(prompt: str, payload: dict[str, Any]) -> str:
    """A thought from the step's own evidence: the task and the history its prompt states, and the
    move it made (`intent`, the words the step's action was described in on its screen)."""
    lines = dict(line.split(": ", 1) for line in prompt.splitlines() if ": " in line)
    move = payload.get("intent") or target_action(payload["action"]).to_json()
    task = lines.get("Task") or lines.get("Instruction")
    history = lines.get("History")
    said = [f"The task is: {task.rstrip('.')}." if task else ""]
    if history is not None:
        said.append("Nothing is done yet." if history == "none" else f"Done so far: {history}.")
    said.append(f"The next move toward it: {move}.")
    return " ".join(s for s in said if s)
