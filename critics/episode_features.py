"""The learned critic's features of an episode, from what a critic sees (`CriticView`) alone.

They say how the task's words and quoted values were covered by what was tapped and typed and
by the screens shown, how the run ended (a success claim, giving up, running out), and how much
of it went nowhere (no-op actions, repeated screens, misses, unparsed output), and the elements
the task names (`critics.task_words`): those shown but never tapped, a named switch's end state
against the one asked, each of the task's parts acted on, typing that was asked for, a run that
ends by pressing back. Nothing in them names an app, a widget or a task, so a critic trained on
some apps judges others; each feature's weight is held to the side its evidence points (`SIGNS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from critics.task_words import (
    GENERIC,
    ROLE_WORDS,
    clause_texts,
    clauses,
    goes_away,
    is_commit,
    name_in_task,
    part_acted,
    share,
    state_asked,
    texts,
    touched_words,
    untyped_parts,
    without_shown_task,
)
from critics.view import CriticView
from trajforge.domain import SeenElement, StepView
from trajforge.text import quoted, words

_TOUCH = ("click", "long_press")
# Each feature with the direction its evidence may point: +1 only toward success, -1 only toward
# failure, 0 either way. The fit keeps every weight on its side (a feature whose unconstrained weight
# would cross is left out), so a pattern peculiar to the apps it was fitted on cannot turn evidence
# around on an app it has not seen.
SIGNS: dict[str, int] = {
    "claims_success": 1,
    "gives_up": -1,
    "no_end_claim": -1,
    "steps": -1,
    "no_op_share": -1,
    "repeat_share": -1,
    "unparsed_share": -1,
    "miss_share": -1,
    "away_share": -1,
    "covered_by_actions": 1,
    "covered_on_end_screen": 1,
    "covered_anywhere": 1,
    "quoted_on_end_screen": 1,
    "typed_unasked": -1,
    "typing_asked_not_done": -1,
    "last_touch_named": 1,
    "named_checked": 0,
    "named_unchecked": 0,
    "end_changed": 0,
    "claim_x_end_covered": 1,
    "claim_x_no_op": -1,
    "clauses_acted": 1,
    "last_clause_acted": 1,
    "last_touch_in_last_clause": 1,
    "acted_after_last_clause": -1,
    "ends_on_last_clause": 1,
    "claim_x_ends_on_last": 1,
    "claim_x_clauses": 1,
    "every_clause_acted": 1,
    "last_touch_unnamed": -1,
    "last_touch_role_named": 1,
    "last_touch_all_named": 1,
    "quoted_acted": 1,
    "named_untouched": -1,
    "end_named_untouched": -1,
    "named_touched": 1,
    "last_move_away": -1,
    "named_state_as_asked": 1,
    "named_state_not_as_asked": -1,
}
FEATURES = tuple(SIGNS)


def features(view: CriticView) -> list[float]:
    """The episode's observation features, in `FEATURES` order."""
    seen = _Seen.of(without_shown_task(view))
    row = seen.conduct() | seen.coverage() | seen.clauses() | seen.naming()
    return [row[f] for f in FEATURES]


@dataclass(frozen=True)
class _Seen:
    """What the features are read from: the episode's actions against the task's words."""

    view: CriticView
    asked: set[str]  # the task's words, less the generic ones
    values: list[str]  # the task's quoted values
    claim: bool  # the run ends claiming success
    hits: list[SeenElement | None]  # per step: the element a touch hit (None: no touch, or a miss)
    touched: list[SeenElement | None]  # per touch: the element it hit (None: a miss)
    typed: list[str]
    acted: set[str]  # the task's words the actions touched or typed
    touch: set[str]  # the task's words of the last element touched
    last_touch: SeenElement | None
    moving: list[StepView]  # the steps that are not the end claim
    moved: list[int]  # indexes into `moving` of the steps that changed the screen

    @classmethod
    def of(cls, view: CriticView) -> _Seen:
        asked = set(words(view.instruction)) - GENERIC
        steps = view.steps
        last = (steps[-1].action or {}) if steps else {}
        taps = [(st.action or {}).get("kind") in _TOUCH for st in steps]
        hits = [st.touched() if tap else None for st, tap in zip(steps, taps, strict=True)]
        touched = [e for e, tap in zip(hits, taps, strict=True) if tap]
        typed = [t for st in steps if (t := str((st.action or {}).get("text") or "").casefold().strip())]
        acted = {w for e in touched if e is not None for w in touched_words(e, asked)}
        last_touch = next((e for e in reversed(touched) if e is not None), None)
        moving = [st for st in steps if (st.action or {}).get("kind") != "terminate"]
        return cls(
            view=view,
            asked=asked,
            values=[q.casefold().strip() for q in quoted(view.instruction)],
            claim=last.get("kind") == "terminate" and last.get("status") == "success",
            hits=hits,
            touched=touched,
            typed=typed,
            acted=acted | {w for t in typed for w in words(t)},
            touch=touched_words(last_touch, asked) - GENERIC if last_touch is not None else set(),
            last_touch=last_touch,
            moving=moving,
            moved=[i for i, st in enumerate(moving) if st.before != st.after],
        )

    def conduct(self) -> dict[str, float]:
        """How the run went, whatever the task: its end, its length, wasted and failed moves."""
        steps = self.view.steps
        n = max(len(steps), 1)
        last = (steps[-1].action or {}) if steps else {}
        seen: set[str] = set()
        repeats = 0
        for st in steps:
            repeats += st.before in seen
            seen.add(st.before)
        no_op = sum(st.before == st.after for st in self.moving) / max(len(self.moving), 1)
        return {
            "claims_success": float(self.claim),
            "gives_up": float(last.get("kind") == "terminate" and not self.claim),
            "no_end_claim": float(last.get("kind") != "terminate"),
            "steps": len(steps) / 30,
            "no_op_share": no_op,
            "repeat_share": repeats / n,
            "unparsed_share": sum(st.action is None for st in steps) / n,
            "miss_share": sum(e is None for e in self.touched) / max(len(self.touched), 1),
            "away_share": sum(goes_away(st.action) for st in steps) / n,
            "end_changed": float(bool(steps) and steps[-1].before != steps[-1].after),
            "claim_x_no_op": float(self.claim) * no_op,
            "last_move_away": float(bool(self.moved) and goes_away(self.moving[self.moved[-1]].action)),
        }

    def coverage(self) -> dict[str, float]:
        """How much of the task's words the actions and the screens show."""
        steps, asked, values = self.view.steps, self.asked, self.values
        end = steps[-1].seen if steps else ()
        end_covered = share(texts(end), asked)
        end_texts = [e.text.casefold() for e in end]
        touched_texts = [e.text.casefold() for e in self.touched if e is not None]
        named = [e for e in end if e.checked is not None and set(words(e.text)) & asked]
        task = self.view.instruction.casefold()
        return {
            "covered_by_actions": share(self.acted, asked),
            "covered_on_end_screen": end_covered,
            "covered_anywhere": share({w for st in steps for w in texts(st.seen)} | self.acted, asked),
            "quoted_on_end_screen": (
                sum(any(v in t for t in end_texts) for v in values) / len(values) if values else 0.0
            ),
            "typed_unasked": sum(t not in task for t in self.typed) / max(len(self.typed), 1),
            "last_touch_named": share(asked, self.touch) if self.touch else 0.0,
            "named_checked": sum(bool(e.checked) for e in named) / max(len(named), 1),
            "named_unchecked": sum(e.checked is False for e in named) / max(len(named), 1),
            "claim_x_end_covered": float(self.claim) * end_covered,
            "last_touch_all_named": float(bool(self.touch) and self.touch <= asked),
            "quoted_acted": (
                sum(v in self.typed or any(v in t for t in touched_texts) for v in values) / len(values)
                if values
                else 0.0
            ),
            "last_touch_role_named": float(
                self.last_touch is not None and bool(ROLE_WORDS.get(self.last_touch.role, set()) & asked)
            ),
            "last_touch_unnamed": float(
                self.last_touch is not None
                and bool(self.touch)
                and not self.touch & asked
                and not is_commit(self.last_touch)
            ),
        }

    def clauses(self) -> dict[str, float]:
        """Whether the task's parts were acted on, the last one last."""
        steps, asked = self.view.steps, self.asked
        parts = clauses(self.view.instruction)
        essential = frozenset(w for v in self.values for w in words(v))
        per_action = [
            (touched_words(e, asked) if e is not None else set())
            | set(words(str((st.action or {}).get("text") or "")))
            for e, st in zip(self.hits, steps, strict=True)
        ]
        done_at = next(
            (i for i, w in enumerate(per_action) if parts and part_acted(parts[-1], w, essential)), None
        )
        last_hit = max((i for i, w in enumerate(per_action) if parts and w & parts[-1]), default=None)
        commits = {i for i, e in enumerate(self.hits) if e is not None and is_commit(e)}
        after_last = (
            sum(i > last_hit and i not in commits for i in self.moved)
            if last_hit is not None
            else len(self.moved)
        )
        ends_on_last = float(
            bool(parts)
            and part_acted(parts[-1], self.acted, essential)
            and last_hit is not None
            and not after_last
        )
        done = self._parts_done(parts, essential)
        clauses_acted = sum(done) / len(done) if done else 0.0
        return {
            "typing_asked_not_done": untyped_parts(parts, {w for t in self.typed for w in words(t)}),
            "clauses_acted": clauses_acted,
            "last_clause_acted": float(done_at is not None),
            "last_touch_in_last_clause": float(bool(parts) and bool(self.touch & parts[-1])),
            "acted_after_last_clause": min(after_last, 10) / 10,
            "ends_on_last_clause": ends_on_last,
            "claim_x_ends_on_last": float(self.claim) * ends_on_last,
            "claim_x_clauses": float(self.claim) * clauses_acted,
            "every_clause_acted": float(bool(done) and all(done)),
        }

    def _parts_done(self, parts: list[set[str]], essential: frozenset[str]) -> list[bool]:
        # a part is done when half its words were acted on, or a thing it names was tapped or typed
        hit = self._named_hit
        return [
            part_acted(part, self.acted, essential) or any(name.strip("<>") in raw for name in hit)
            for raw, part in zip(self._raw_parts, parts, strict=True)
        ]

    @cached_property
    def _raw_parts(self) -> list[str]:
        return clause_texts(self.view.instruction.casefold())  # the same parts as `clauses`, as text

    @cached_property
    def _named_shown(self) -> set[str]:
        task = self.view.instruction.casefold()
        return {nm for st in self.view.steps for e in st.seen if (nm := name_in_task(e, task, self.asked))}

    @cached_property
    def _named_hit(self) -> set[str]:
        task = self.view.instruction.casefold()
        hit = {nm for e in self.touched if e is not None and (nm := name_in_task(e, task, self.asked))}
        return hit | {name for name in self._named_shown if any(name in t for t in self.typed)}

    def naming(self) -> dict[str, float]:
        """The elements the task names: shown, touched, left as the task asks."""
        steps, task = self.view.steps, self.view.instruction.casefold()
        end = steps[-1].seen if steps else ()
        shown, hit = self._named_shown, self._named_hit
        end_named = {nm for e in end if (nm := name_in_task(e, task, self.asked))}
        states = [
            (e.checked, state_asked(nm, self._raw_parts))
            for e in end
            if e.checked is not None and (nm := name_in_task(e, task, self.asked))
        ]
        return {
            "named_untouched": len(shown - hit) / max(len(shown), 1),
            "end_named_untouched": len(end_named - hit) / max(len(end_named), 1),
            "named_touched": len(hit) / max(len(shown), 1),
            "named_state_as_asked": sum(c == want for c, want in states) / max(len(states), 1),
            "named_state_not_as_asked": sum(c != want for c, want in states) / max(len(states), 1),
        }
