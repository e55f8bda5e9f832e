"""Exported action rows shaped by a model family: the conversation its published inference code
sends at rollout (`trajforge.families`), so a checkpoint fine-tuned on the export is rolled out
exactly as it was trained.

A row's conversation is the family's `messages` for the row's task, screen and history: an
action-prediction row's history is its episode's earlier steps, each the action as the family's
codec writes it in the family's coordinate space of that step's exported image (what the model
would have answered there, with the policy's own thought and conclusion where the family's prompt
asks for them; GUI-Owl's conclusion gets the step in words where none was recorded), with the
screenshots the family keeps; an intent-execution row's task is the step's instruction and it has no
history. The answer is the row's action in the same codec and space, with exactly the notes the
family's prompt asks for (`Family.asks`): the policy's own, else written by the export and listed
in the row's ground truth as `written`. The trainers' chat layouts alternate user and assistant
turns, so turns of one role in a row (UI-TARS sends its instruction and the screenshot as two user
messages) are joined, text and `<image>` tags in order. Knowledge rows (questions about the
screen) keep their own prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.episodes import steps_by_episode
from storage.models import Episode
from trajforge.actions import Screen, get_codec
from trajforge.actions.space import conform
from trajforge.domain import describe
from trajforge.episode import Step
from trajforge.families import Family, Turn

IMAGE_TOKEN = "<image>"
Chat = list[dict[str, str]]


def prompt_fields(prompt: str) -> dict[str, str]:
    """A CSRS prompt's `Name: value` lines (Task, History, Instruction, ...)."""
    return dict(line.split(": ", 1) for line in prompt.splitlines() if ": " in line)


class FamilyShaper:
    """Builds rows' conversations for one family; `size_of` gives a screenshot's exported size from
    its stored (width, height) without writing it."""

    def __init__(
        self, family: Family, sessions: sessionmaker[Session], size_of: Callable[[int, int], tuple[int, int]]
    ) -> None:
        self.family, self.sessions, self.size_of = family, sessions, size_of
        self.codec = get_codec(family.action_format)
        self._episode: tuple[str, list[Step]] = ("", [])

    def screen(self, size: tuple[int, int]) -> Screen:
        """The family's coordinate space for an exported image of `size`."""
        return self.family.coordinate_screen(*size)

    def conversation(
        self, row: dict[str, Any], answer: str, size: tuple[int, int]
    ) -> tuple[Chat, list[str]] | None:
        """The row's turns (system, user and assistant, contents as strings with `<image>` tags) ending
        with `answer`, and the screenshots the tags stand for, in order; None without a task."""
        fields = prompt_fields(row["prompt"])
        task = fields.get("Task") or fields.get("Instruction")
        if not task:
            return None
        history = self.history(row) if "Task" in fields else []
        current = row["images"][-1]
        messages = self.family.messages(
            task, Screen(*size), history, current, lambda sha: {"type": "image", "sha": sha}
        )
        return joined([*messages, {"role": "assistant", "content": answer}], self.family.image_placeholder)

    def history(self, row: dict[str, Any]) -> list[Turn]:
        """The row's episode's steps before its own, as the family's own answers."""
        turns = []
        for step in self._steps(row["episode"]):
            if step.index >= row["step"] or step.action is None:  # an unparsed answer did nothing
                continue
            screen = self.screen(self.size_of(step.width, step.height))
            action = (
                step.action
            )  # with the policy's own notes; those the family's prompt never asks are left out
            action = action.model_copy(
                update={n: None for n in self.codec.notes if n not in self.family.asks}
            )
            if "intent" in self.family.asks and action.intent is None:  # the step in words, as rows say it
                action = action.model_copy(update={"intent": describe(action, step.view())})
            stated, _ = conform(self.codec, action, screen)
            if stated is not None:
                turns.append(Turn(step.screenshot, self.codec.format(stated, screen)))
        return turns

    def _steps(self, uid: str) -> list[Step]:
        if self._episode[0] != uid:  # rows stream by category, so one episode's rows are often adjacent
            with self.sessions() as s:
                found = s.scalar(select(Episode.id).where(Episode.uid == uid))
                steps = steps_by_episode(s, Episode.id == found).get(found, []) if found else []
            self._episode = (uid, steps)
        return self._episode[1]


def joined(messages: list[dict[str, Any]], placeholder: str | None = None) -> tuple[Chat, list[str]]:
    """OpenAI-style messages as a trainer's chat layout: string contents with `<image>` tags, turns of
    one role in a row joined, and the screenshots' hashes in tag order. A family's own image
    `placeholder` in the text is where its image goes: the tag is written there, once."""
    chat: Chat = []
    images: list[str] = []
    for message in messages:
        content = message["content"]
        parts = [content] if isinstance(content, str) else content
        text = ""
        for part in parts:
            if isinstance(part, str):
                text += part
            elif part.get("type") == "text" and placeholder and placeholder in part.get("text", ""):
                text += part["text"].replace(placeholder, "")  # the tag follows, from the image part
            elif part.get("type") == "image":
                text += IMAGE_TOKEN
                images.append(part["sha"])
            else:
                text += part.get("text", "")
        if chat and chat[-1]["role"] == message["role"]:
            chat[-1]["content"] += ("" if text.startswith(IMAGE_TOKEN) else "\n") + text
        else:
            chat.append({"role": message["role"], "content": text})
    return chat, images
