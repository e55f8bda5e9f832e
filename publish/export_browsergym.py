"""The `browsergym` export: action rows as a BrowserGym agent reads and answers, so an agent trains
in its own action space on what it will be shown.

A row is the conversation BrowserGym's demo agent sends its model (ServiceNow/BrowserGym
`demo_agent/agent.py`, `DemoAgent.get_action`, goal mode, accessibility tree on, no HTML, no
screenshot, its defaults in `run_demo.py`): the system text "# Instructions ...", then the user's
parts "# Goal", "# Currently open tabs", "# Current page Accessibility Tree" (BrowserGym's own
`flatten_axtree_to_str` of the step's page), "# Action Space" (`HighLevelActionSet.describe`, of the
subsets the rollout ran with, and the agent's two examples), "# History of past actions" with
"# Error message from last action" where there are past actions, and "# Next action". The text
parts are joined as a chat template renders them (one after the other). The answer is the step's
action string, the one BrowserGym executed (`click("12")`, `fill("15", "text")`,
`select_option(...)`), in a code block after its reasoning: the policy's own thought, else one
written from the step's evidence and marked `written` in the row's meta. A row whose action was not
played (a recovery sample's correction) is aimed at the element under its point on that step's
page, as the rollout aims one. History entries are the earlier steps' answers as the policy gave
them (its thought where it gave one).

Only steps of BrowserGym episodes have that observation (`Episode.observed`, recorded by the
browsergym suite); every other row is skipped with a counted reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from publish.export_notes import offline_thought
from publish.export_rows import ExportReport
from storage.datasets import Manifest, iter_rows
from storage.episodes import steps_by_episode
from storage.keys import blob_key
from storage.models import Episode
from storage.objectstore import ObjectStore
from trajforge.actions import Action, Screen
from trajforge.actions.browsergym import to_code
from trajforge.actions.compare import element_at, mismatch
from trajforge.episode import Step

SOURCE = "ServiceNow/BrowserGym demo_agent/agent.py DemoAgent.get_action"
SYSTEM = """\
# Instructions

Review the current state of the page and all other information to find the best
possible next action to accomplish your goal. Your answer will be interpreted
and executed by a program, make sure to follow the formatting instructions.
"""
EXAMPLES = (  # the demo agent's text, verbatim (long lines split here only)
    "Here are examples of actions with chain-of-thought reasoning:\n\n"
    "I now need to click on the Submit button to send the form. I will use the click action on the "
    'button, which has bid 12.\n```click("12")```\n\n'
    "I found the information requested by the user, I will send it to the chat.\n"
    '```send_msg_to_user("The price for a 15\\" laptop is 1499 USD.")```\n\n'
)
NEXT = (
    "# Next action\n\nYou will now think step by step and produce your next best action. Reflect on "
    "your past actions, any resulting error message, and the current state of the page before "
    "deciding on your next action.\n"
)
NO_OBSERVATION = "no_browsergym_observation"  # a row of another environment, or a question about the screen


def user_text(seen: dict[str, Any], history: list[str]) -> str:
    """The demo agent's user parts for one observation, joined."""
    parts = ["# Goal\n", seen["goal"], "# Currently open tabs\n"]
    for i, (url, title) in enumerate(seen["tabs"]):
        active = " (active tab)" if i == seen["active_tab"] else ""
        parts.append(f"Tab {i}{active}\n  Title: {title}\n  URL: {url}\n")
    parts.append(f"# Current page Accessibility Tree\n\n{seen['axtree_txt']}\n\n")
    parts.append(f"# Action Space\n\n{seen['action_space']}\n\n{EXAMPLES}")
    if history:
        parts += ["# History of past actions\n", *(f"\n{said}\n" for said in history)]
        if seen["last_action_error"]:
            parts.append(f"# Error message from last action\n\n{seen['last_action_error']}\n\n")
    parts.append(NEXT)
    return "".join(parts)


def answer(thought: str | None, code: str) -> str:
    """An answer as the demo agent's examples write one: the reasoning, then the action in a block."""
    return f"{thought}\n```{code}```" if thought else f"```{code}```"


class _Episodes:
    """Each episode's steps and BrowserGym observations, read once per episode (rows of one episode
    come together, and several rows of one step share its observation)."""

    def __init__(self, sessions: sessionmaker[Session], store: ObjectStore) -> None:
        self.sessions, self.store = sessions, store
        self._uid = ""
        self._steps: list[Step] = []
        self._observed: list[dict[str, Any]] = []
        self._seen: dict[str, dict[str, Any]] = {}  # this episode's observations read, by sha

    def load(self, uid: str) -> tuple[list[Step], list[dict[str, Any]]]:
        if uid != self._uid:
            with self.sessions() as s:
                row = s.scalars(select(Episode).where(Episode.uid == uid)).first()
                found = steps_by_episode(s, Episode.uid == uid) if row is not None else {}
                self._steps = next(iter(found.values()), [])
                self._observed = list((row.meta or {}).get("observed") or []) if row is not None else []
            self._uid, self._seen = uid, {}
        return self._steps, self._observed

    def seen(self, sha: str) -> dict[str, Any]:
        if sha not in self._seen:
            self._seen[sha] = dict(json.loads(self.store.get(blob_key(sha))))
        return self._seen[sha]


def _code(action: Action, step: Step, sent: str | None, seen: dict[str, Any]) -> str:
    """The action string: the one BrowserGym executed for the step where the row's action is the step's
    own, else the row's action aimed on the step's page as the rollout aims one."""
    screen = Screen(step.width, step.height)
    if (
        sent
        and step.action is not None
        and mismatch(action.core(), step.action.core(), [], screen, 1) is None
    ):
        return sent
    scale = step.width / max(1, int(seen["viewport"][0]))

    def css(point: tuple[int, int] | None) -> tuple[float, float]:
        px = screen.to_px(point) if point is not None else (0, 0)
        return (px[0] / scale, px[1] / scale)

    target = element_at(step.elements or [], action.point, screen) if action.point else None
    return to_code(action, target, css(action.point), None if action.to is None else css(action.to))


def export_browsergym(
    man: Manifest, sessions: sessionmaker[Session], store: ObjectStore, root: Path, report: ExportReport
) -> None:
    """Write each action row of a BrowserGym step as the demo agent's conversation (module docstring),
    a JSONL file per split, and LLaMA-Factory's `dataset_info.json` for them."""
    stem = f"{man.dataset}_v{man.version}"
    files: dict[str, TextIO] = {}

    def open_split(split: str) -> TextIO:
        if split not in files:
            files[split] = (root / f"{stem}_{split}.jsonl").open("w", encoding="utf-8")
        return files[split]

    try:
        _write_rows(man, sessions, store, open_split, report)
    finally:
        for f in files.values():
            f.close()
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    info = {
        f"{stem}_{split}": {
            "file_name": f"{stem}_{split}.jsonl",
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": tags | {"system_tag": "system"},
        }
        for split in sorted(files)
    }
    (root / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    report.notes.append(
        f"rows are BrowserGym's demo agent's conversation ({SOURCE}); answers its action strings"
    )


def _write_rows(
    man: Manifest,
    sessions: sessionmaker[Session],
    store: ObjectStore,
    open_split: Callable[[str], TextIO],
    report: ExportReport,
) -> None:
    episodes = _Episodes(sessions, store)
    for row in iter_rows(store, man):
        payload = json.loads(row["payload"])
        steps, observed = episodes.load(row["episode"]) if row["episode"] else ([], [])
        index = row["step"]
        if payload.get("action") is None or index is None or index >= len(observed) or index >= len(steps):
            report.skipped[NO_OBSERVATION] += 1
            continue
        if "text" not in observed[index]:
            report.skipped[NO_OBSERVATION] += 1
            continue
        seen, step = episodes.seen(observed[index]["text"]), steps[index]
        history = [  # an earlier answer that did not parse did nothing: it is not shown
            answer(earlier.action.thought, observed[i]["sent"])
            for i, earlier in enumerate(steps[:index])
            if earlier.action is not None and observed[i].get("sent")
        ]
        action = Action.model_validate(payload["action"])
        code = _code(action, step, observed[index].get("sent"), seen)
        written = action.thought is None
        thought = action.thought or offline_thought(row["prompt"], payload)
        report.offline_thoughts += written
        record = {
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": user_text(seen, history)},
                {"role": "assistant", "content": answer(thought, code)},
            ],
            "meta": {"uid": row["uid"], "category": row["category"], "query": row["query"], "action": code}
            | ({"written": ["thought"]} if written else {}),
        }
        open_split(row["split"]).write(json.dumps(record, ensure_ascii=False) + "\n")
        report.rows[row["split"]] += 1
