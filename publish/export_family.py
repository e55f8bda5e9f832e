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
in the row's ground truth as `written`. LLaMA-Factory's sharegpt converter and ms-swift's messages
take only alternating user and assistant turns, so for them turns of one role in a row (UI-TARS
sends its instruction and the screenshot as two user messages, and its earlier outputs beyond the
last four screenshots as assistant messages one after another) are joined, text and `<image>` tags
in order; train those with the trainer's own history mask (LLaMA-Factory `mask_history: true`), so
a joined history turn is never a target. verl renders a prompt with the processor's chat template,
which takes any turns: its rows keep every turn as the family's inference code sent it
(`alternate=False`), one output per assistant turn. Knowledge rows (questions about the
screen) keep their own prompt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.episodes import steps_by_episode
from storage.models import Episode
from storage.models import Query as QueryRow
from trajforge.actions import Action, Screen, get_codec
from trajforge.actions.compare import mismatch
from trajforge.actions.space import conform
from trajforge.domain import describe
from trajforge.episode import Step
from trajforge.errors import ActionError
from trajforge.families import Family

IMAGE_TOKEN = "<image>"
Chat = list[dict[str, str]]


def prompt_fields(prompt: str) -> dict[str, str]:
    """A CSRS prompt's `Name: value` lines (Task, History, Instruction, ...)."""
    return dict(line.split(": ", 1) for line in prompt.splitlines() if ": " in line)


class FamilyShaper:
    """Builds rows' conversations for one family; `size_of` gives a screenshot's exported size from
    its stored (width, height) without writing it."""

    def __init__(
        self,
        family: Family,
        sessions: sessionmaker[Session],
        size_of: Callable[[int, int], tuple[int, int]],
        alternate: bool = True,
    ) -> None:
        self.family, self.sessions, self.size_of = family, sessions, size_of
        self.alternate = alternate  # join turns of one role in a row, for a trainer that needs that
        self.codec = get_codec(family.action_format)
        self._episode = _Played("", [], None, None)
        self.checked = self.mismatched = 0  # rows compared with the request their rollout sent
        # earlier steps the family's codec cannot state, so no row's history shows them: their kind
        self.unstated: dict[tuple[str, int], str] = {}

    def notes(self) -> list[str]:
        """What the export tells the user about the rows' history: the steps it could not show."""
        if not self.unstated:
            return []
        kinds = Counter(self.unstated.values())
        return [
            f"{len(self.unstated)} earlier step(s) the {self.family.name} format cannot state are not in "
            f"the history of the rows after them ({', '.join(f'{k}: {n}' for k, n in kinds.most_common())}); "
            "their effect shows on the next screenshot"
        ]

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
        messages = self.family.messages(task, Screen(*size), history, current, _image_tag)
        chat, images = joined(
            [*messages, {"role": "assistant", "content": answer}],
            self.family.image_placeholder,
            self.alternate,
        )
        if "Task" in fields:
            self._check(row, chat, images, size)
        return chat, images

    def served_answer(self, row: dict[str, Any], stated: Action, size: tuple[int, int]) -> str | None:
        """The model's own output for the row's step, verbatim, where the row's answer is that output:
        this family rolled the step out, on an image of this size, the row's action is the one the
        output says, and it holds no note the family's prompt does not ask for. None otherwise (the
        answer is then written in the family's codec)."""
        step = self._served_step(row, size)
        if step is None or step.action is None:
            return None
        screen = self.screen(size)
        try:
            said = self.codec.parse(step.raw_output, screen)
        except ActionError:
            return None
        if any(getattr(said, n) for n in self.codec.notes if n not in self.family.asks):
            return None  # it says more than the family's prompt asks: written with what it asks instead
        return step.raw_output if mismatch(said.core(), stated.core(), [], screen, 1) is None else None

    def history(self, row: dict[str, Any]) -> list[Step]:
        """The row's episode's steps before its own, as the family's own answers: where this family
        rolled the episode out on images of this size, each step's output verbatim, as the rollout
        sent it back (unparsed ones too); otherwise each action in the family's codec."""
        earlier = [step for step in self._steps(row["episode"]) if step.index < row["step"]]
        if earlier and all(self._served(step) for step in earlier):
            return earlier
        turns = []
        for step in earlier:
            if step.action is None:  # an unparsed answer did nothing
                continue
            screen = self.screen(self.size_of(step.width, step.height))
            unasked = {n: None for n in self.codec.notes if n not in self.family.asks}
            action = step.action.model_copy(update=unasked)  # the policy's own notes its prompt asks for
            if "intent" in self.family.asks and action.intent is None:  # the step in words, as rows say it
                action = action.model_copy(update={"intent": describe(action, step.view())})
            # a note the codec cannot leave out but the policy never gave (Mobile-R1's <think>) stays
            # empty: the family's history reads the step's intent, not its reasoning
            required = getattr(self.codec, "required_notes", ())
            action = action.model_copy(update={n: "" for n in required if getattr(action, n) is None})
            stated, _ = conform(self.codec, action, screen)
            if stated is None:
                self.unstated[row["episode"], step.index] = " ".join(filter(None, (action.kind, action.key)))
            else:
                turns.append(step.model_copy(update={"raw_output": self.codec.format(stated, screen)}))
        return turns

    def _check(self, row: dict[str, Any], chat: Chat, images: list[str], size: tuple[int, int]) -> None:
        """Compare the row's conversation (less its answer) with the request this family's rollout
        sent for the step, rendered again from what was stored: the query's instruction, the
        episode's earlier outputs verbatim, the step's screenshot at its own size. Rows of steps
        no request of this family was sent for (another policy, a resized image) are not compared."""
        step = self._served_step(row, size)
        played = self._episode
        if step is None or played.instruction is None:
            return
        earlier = [s for s in played.steps if s.index < step.index]
        sent = self.family.messages(
            played.instruction, Screen(step.width, step.height), earlier, step.screenshot, _image_tag
        )
        self.checked += 1
        self.mismatched += joined(sent, self.family.image_placeholder, self.alternate) != (chat[:-1], images)

    def _served(self, step: Step) -> bool:
        """Whether this family's rollout sent a request for `step` on an image of the exported size."""
        return self._episode.family == self.family.name and self.size_of(step.width, step.height) == (
            step.width,
            step.height,
        )

    def _served_step(self, row: dict[str, Any], size: tuple[int, int]) -> Step | None:
        """The row's own step, where this family's rollout sent its request on an image of `size`."""
        for step in self._steps(row["episode"]):
            if step.index == row["step"]:
                return step if self._served(step) and (step.width, step.height) == size else None
        return None

    def _steps(self, uid: str) -> list[Step]:
        if self._episode.uid != uid:  # rows stream by category, so one episode's rows are often adjacent
            with self.sessions() as s:
                found = s.execute(
                    select(Episode.id, Episode.meta, QueryRow.instruction)
                    .join(QueryRow, QueryRow.id == Episode.query_id)
                    .where(Episode.uid == uid)
                ).first()
                steps = steps_by_episode(s, Episode.id == found[0]).get(found[0], []) if found else []
            sampling = (found[1] or {}).get("sampling") or {} if found else {}
            self._episode = _Played(uid, steps, sampling.get("family"), found[2] if found else None)
        return self._episode.steps


@dataclass(frozen=True)
class _Played:
    """An episode as its rows' conversations need it: its steps, the family its policy spoke (None:
    not a family's rollout) and its query's instruction."""

    uid: str
    steps: list[Step]
    family: str | None
    instruction: str | None


def _image_tag(sha: str) -> dict[str, Any]:
    return {"type": "image", "sha": sha}


def joined(
    messages: list[dict[str, Any]], placeholder: str | None = None, alternate: bool = True
) -> tuple[Chat, list[str]]:
    """OpenAI-style messages as a trainer's chat layout: string contents with `<image>` tags, turns of
    one role in a row joined where the trainer needs the roles to `alternate`, and the screenshots'
    hashes in tag order. A family's own image `placeholder` in the text is where its image goes: the
    tag is written there, once."""
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
        if alternate and chat and chat[-1]["role"] == message["role"]:
            chat[-1]["content"] += ("" if text.startswith(IMAGE_TOKEN) else "\n") + text
        else:
            chat.append({"role": message["role"], "content": text})
    return chat, images
