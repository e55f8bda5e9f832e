"""The built-in trainable policy: nearest neighbours over screenshots and instructions.

It learns from an exported dataset version, the `rl-verl` Parquet rows a trainer would
read: the screenshot, the task prompt, the ground-truth action and the target's bbox.
Nothing else: no simulator state, no element tree at training time.

Acting, it embeds the screenshot (a grey thumbnail), finds the demonstrations whose
screen looks the same and whose instruction reads alike (rare words weigh more), and lets
them vote:

- a tap votes for the element on the current screen under the demonstrated bbox. When
  that element is a row of a list, the row is chosen by what the instruction says (the
  demonstration taught *which list*, the task says *which row*); when no visible row is
  named whole, the vote is to scroll;
- typed text is copied from the same place of the current instruction (the words after
  the word that preceded it in the demonstration's instruction, up to the word that
  followed it);
- presses, swipes, app launches and `terminate` vote as they are.

A control the task names (a button, toggle, text field or list row whose words, those that
set it apart on its screen, the instruction says) gets a vote above the best neighbour's,
and beats the one a demonstration tapped; among several, the one the task says first. A
text field just tapped waits for its text. Once the task's named moves are done
(`knn_text.Coverage`), a neighbour's tap on a control its own task named, and ours does
not, votes to end. A named control waits while a value the task quotes before it ('Enter
"Myron" ... and press Submit') has not been typed or picked. When the last action changed
nothing, only actions not yet tried on this screen are voted on, and with none left the
policy presses back. The memory it votes from, and its checkpoint, are `knn_memory.Memory`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rollout.policies.base import PolicyOutput, observed, say
from rollout.policies.knn_memory import Memory, train_from_export
from rollout.policies.knn_text import (
    CONTROLS,
    Coverage,
    Rarity,
    copy_span,
    label,
    named,
    said,
    shared,
)
from rollout.policies.oracle import box_overlap, element_bounds, element_center
from storage.policies import KNN
from trajforge.actions import Action, ActionKind, get_codec
from trajforge.actions.compare import element_at
from trajforge.domain import Observation, Query
from trajforge.features import ThumbFeaturizer
from trajforge.sample import target_action
from trajforge.text import words

NAME = KNN  # the name its checkpoints are registered under
THEIRS, AGAIN = "theirs", "again"  # why a neighbour tapped a control its task named (see KnnPolicy._map)
K = 8  # neighbours that vote
SAME_SCREEN = 0.02  # cosine slack: neighbours this close to the best match count as the same screen
INSTRUCTION_WEIGHT = 0.5  # how much instruction overlap weighs against screen similarity
PHASE_WEIGHT = 0.3  # ... a matching previous action (after tapping a text box comes typing)
STEP_WEIGHT = 0.02  # ... per step of distance into the episode
SHARPNESS = 8.0  # vote weight falls as exp(-SHARPNESS * score gap to the best neighbour)
REPEAT_PENALTY = 2.0  # an action already taken on this very screen counts 1 / (1 + 2n)
TEMPERATURE = 0.5  # rollouts after the first sample actions with odds vote ** (1 / TEMPERATURE)
NEAR = 60  # 0-1000 units: two taps this close are the same tap
NAMED_VOTE = 1.5  # a control the task names, on screen, gets this share of the best neighbour vote
LATER_NAMED = 0.3  # ... this much of it when the task names another control on screen first
AGAIN_VOTE = 0.1  # once done, a neighbour's move on a widget we already tapped votes this much to end


def _phase(before: dict[str, Any] | None, mine: Action | None) -> float:
    """How well a demonstration's previous action matches ours: 1 same, 0.5 same kind, 0 otherwise."""
    if before is None or mine is None:
        return 1.0 if before is None and mine is None else 0.0
    if before.get("kind") != mine.kind.value:
        return 0.0
    point = before.get("point")
    if point is None or mine.point is None:
        return 1.0 if before.get("text") == mine.text and before.get("key") == mine.key else 0.5
    near = abs(point[0] - mine.point[0]) + abs(point[1] - mine.point[1]) <= NEAR
    return 1.0 if near else 0.5


def _widget(element: dict[str, Any]) -> str:
    return str(element.get("widget") or label(element))


def _nearest_control(elements: list[dict[str, Any]], box: tuple[int, int, int, int]) -> dict[str, Any] | None:
    """The control (anything but text) whose centre is nearest the box's centre, if any."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    controls = [e for e in elements if e.get("kind") != "text"]
    return min(
        controls,
        key=lambda e: math.dist(element_center(e), (cx, cy)),
        default=None,
    )


class KnnPolicy:
    """Args: memory: the trained checkpoint; frames maps a screenshot hash to PNG bytes;
    vectors: screenshot features by hash, shared by the episodes of one rollout (screens recur).
    """

    def __init__(
        self,
        memory: Memory,
        frames: Callable[[str], bytes],
        version: int = 1,
        fmt: str = "qwen",
        vectors: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.name, self.version = NAME, version
        self.memory, self.frames = memory, frames
        self.codec = get_codec(fmt)
        self.featurizer = ThumbFeaturizer()
        self._vectors = vectors if vectors is not None else {}
        self._actions = [target_action(a) for a in memory.actions]  # parsed once, at load
        self._voted: dict[str, Action] = {}  # the last vote's actions, by their JSON
        self._instr = [set(words(i)) for i in memory.instructions]
        self._idf = Rarity(memory.instructions)
        self._steps = np.asarray(memory.steps, np.float32)
        self._query: Query | None = None
        self._words: set[str] = set()
        self._step = 0
        self._prev: Action | None = None
        self._screen = ""  # the screenshot the last action was taken on
        self._taken: Counter[tuple[str, str]] = Counter()
        self._spent: set[str] = set()  # labels of named controls already tapped this episode
        self._tapped: set[str] = set()  # widgets (a list, a toggle) tapped this episode
        self._common: frozenset[str] = frozenset()  # words several elements of the screen show
        self._focused = False  # the last action tapped a text field
        self._cover = Coverage("")
        self._explore = False
        self._rng = np.random.default_rng(0)

    def start(self, query: Query, seed: str, guidance: str | None = None, rollout: int = 0) -> None:
        self._query, self._words = query, set(words(query.instruction))
        self._step, self._prev, self._screen, self._taken, self._spent = 0, None, "", Counter(), set()
        self._tapped, self._focused = set(), False
        self._cover = Coverage(query.instruction)
        self._explore = rollout > 0
        self._rng = np.random.default_rng(int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16))

    async def act(self, observation: Observation) -> PolicyOutput:
        action = self.decide(observation)
        return say(action, self.codec, observation)

    def decide(self, obs: Observation) -> Action:
        """The best-voted action, discounted by how often it was already taken on this very screen."""
        votes = self._votes(obs)
        ranked = sorted(
            votes.items(),
            key=lambda kv: (-kv[1] / (1 + REPEAT_PENALTY * self._taken[obs.screenshot, kv[0]]), kv[0]),
        )
        if self._prev is not None and obs.screenshot == self._screen:  # the last action changed nothing:
            ranked = [kv for kv in ranked if not self._taken[obs.screenshot, kv[0]]]  # try what is untried
        choice = ranked[0][0] if ranked else None
        if ranked and self._explore and len(ranked) > 1:  # rollouts after the first sample the vote
            keys = [k for k, _ in ranked]
            odds = np.array([v for _, v in ranked], np.float64) ** (1.0 / TEMPERATURE)
            choice = keys[int(self._rng.choice(len(keys), p=odds / odds.sum()))]
        action = self._voted[choice].model_copy() if choice else Action(kind=ActionKind.PRESS, key="back")
        hit: list[dict[str, Any]] = []
        if action.kind == ActionKind.CLICK and action.point is not None:  # a named control is tapped once
            target = element_at(obs.elements or [], action.point, observed(obs))
            hit = [] if target is None else [target]
            self._spent |= {label(e) for e in hit if self._said(e)}
            self._tapped |= {_widget(e) for e in hit}
        self._focused = any(e.get("kind") == "input" for e in hit)
        self._cover.act(" ".join([label(e) for e in hit if self._said(e)] + [action.text or ""]))
        self._taken[obs.screenshot, action.to_json()] += 1
        self._step += 1
        self._prev, self._screen = action, obs.screenshot
        return action

    def _votes(self, obs: Observation) -> dict[str, float]:
        votes: dict[str, float] = {}
        self._voted = {}
        self._common = shared(obs.elements or [])
        if not len(self.memory):
            return votes
        vec = self._vectors.get(obs.screenshot)
        if vec is None:
            vec = self._vectors[obs.screenshot] = self.featurizer.embed([self.frames(obs.screenshot)])[0]
        screen_sim = self.memory.vectors @ vec
        candidates = np.flatnonzero(screen_sim >= screen_sim.max() - SAME_SCREEN)
        score = {}
        for i in candidates:
            words_i = self._instr[i]
            text_sim = self._idf.overlap(self._words, words_i)
            score[int(i)] = (
                float(screen_sim[i])
                + INSTRUCTION_WEIGHT * text_sim
                + PHASE_WEIGHT * _phase(self.memory.previous[i], self._prev)
                - STEP_WEIGHT * abs(float(self._steps[i]) - self._step)
            )
        best = max(score.values())
        self._cover.see(obs.elements or [])
        done = self._cover.done()
        stop = self._vote_key(Action(kind=ActionKind.TERMINATE, status="success"))
        for i in sorted(score, key=lambda j: (-score[j], j))[:K]:
            action, why = self._map(i, obs)
            vote = float(self.memory.weights[i]) * math.exp(SHARPNESS * (score[i] - best))
            key = self._vote_key(action)
            if done and why:  # the task's named moves are done, and the neighbour did its own task's:
                key = stop  # a new one says "that task went on", ours ends here; one we made is spent
                vote *= 1.0 if why == THEIRS else AGAIN_VOTE
            votes[key] = votes.get(key, 0.0) + vote
        top = max(votes.values())
        here = observed(obs)
        named_here = [  # what the task names on this screen and we have not tapped yet; none while
            (share, e)  # a text field we just tapped waits for its text
            for e in obs.elements or []
            if not self._focused and (share := self._said(e)) and self._fresh(e) and not self._waits(e)
        ]
        named_here.sort(  # named whole, or a text field ("Search products" for "search for ..."), first
            key=lambda se: (se[0] < 1.0 and se[1].get("kind") != "input", self._cover.position(se[1]))
        )  # then in the order the task says them
        for rank, (share, e) in enumerate(named_here):
            key = self._vote_key(Action(kind=ActionKind.CLICK, point=here.from_px(*element_center(e))))
            bonus = NAMED_VOTE * share * top * (1.0 if rank == 0 else LATER_NAMED)
            votes[key] = bonus + votes.get(key, 0.0)  # the demonstrated one first
        return votes

    def _fresh(self, element: dict[str, Any]) -> bool:
        """Not tapped yet as a named control, and showing a task word not acted on yet."""
        return label(element) not in self._spent and not self._cover.spent(element)

    def _waits(self, element: dict[str, Any]) -> bool:
        """A value the task quotes before this control is still to be typed or picked."""
        return self._cover.value_pending(self._cover.position(element))

    def _vote_key(self, action: Action) -> str:
        """The action's JSON, which votes are counted under; the action is kept for `decide`."""
        key = action.to_json()
        self._voted.setdefault(key, action)
        return key

    def _said(self, element: dict[str, Any]) -> float:
        return said(element, self._words, self._common)

    def _named(self, element: dict[str, Any], instruction: set[str] | None = None) -> float:
        return named(element, self._words if instruction is None else instruction, self._common)

    def _map(self, i: int, obs: Observation) -> tuple[Action, str]:
        """Neighbour i's action, carried over to the current screen and task; and why it tapped what
        it did when its own task named that: THEIRS (ours does not name it), AGAIN (we tapped that
        widget already), "" otherwise."""
        action = self._actions[i].model_copy()
        if action.kind == ActionKind.TYPE and self._query is not None:
            text = copy_span(action.text or "", self.memory.instructions[i], self._query.instruction)
            return action.model_copy(update={"text": text}), ""
        bbox = self.memory.bboxes[i]
        if action.kind != ActionKind.CLICK or bbox is None or not obs.elements:
            return action, ""
        here = observed(obs)
        (x1, y1), (x2, y2) = here.to_px((bbox[0], bbox[1])), here.to_px((bbox[2], bbox[3]))
        box = (x1, y1, x2, y2)
        hit = max(obs.elements, key=lambda e: box_overlap(element_bounds(e), box))
        if box_overlap(element_bounds(hit), box) <= 0.0:  # the page moved its controls (a new seed):
            nearest = _nearest_control(obs.elements, box)  # the demonstrated tap goes to the nearest one
            if nearest is None:
                return action, ""
            hit = nearest
        why = ""
        if self._named(hit, self._instr[i]) == 1.0:  # the neighbour's task named all of what it tapped
            why = AGAIN if _widget(hit) in self._tapped else "" if self._said(hit) else THEIRS
        if hit.get("kind") == "list_item" and hit.get("widget"):
            rows = [
                e for e in obs.elements if e.get("widget") == hit["widget"] and e.get("kind") == "list_item"
            ]
            row = max(rows, key=lambda e: self._named(e))
            if self._named(row) < 1.0:
                return Action(kind=ActionKind.SWIPE, point=(500, 600), direction="up"), why
            hit = row
        elif self._named(hit) < 1.0:  # a control the task names beats the one the demo tapped
            peers = [
                e
                for e in obs.elements
                if e.get("kind") in CONTROLS
                and self._named(e) == 1.0
                and self._fresh(e)
                and not self._waits(e)
            ]
            hit = peers[0] if peers else hit
        return Action(kind=ActionKind.CLICK, point=here.from_px(*element_center(hit))), why


def main(argv: list[str] | None = None) -> None:
    """`python -m rollout.policies.knn --data EXPORT --out DIR`: the built-in trainer command."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="An rl-verl export directory.")
    parser.add_argument("--out", type=Path, required=True, help="Where the checkpoint goes.")
    args = parser.parse_args(argv)
    memory = train_from_export(args.data, args.out)
    by_kind = Counter(a["kind"] for a in memory.actions)
    print(f"knn: {len(memory)} demonstrated steps ({dict(sorted(by_kind.items()))}) -> {args.out}")


if __name__ == "__main__":
    main()
