"""Error-recovery samples (InfiGUI-R1 §3.2.3), built from what a device was seen to do.

Prone-to-error steps. The K rollouts of a query are the policy's samples. A step `s` of a
successful rollout (the reference) is prone to error when another rollout, after the same
moves, sampled a different action at `s` and then failed, or the step critic called that
action HARMFUL. Among the rollouts that reached `s` this way, the success rate lies strictly
between 0 and 1. Moves are compared by what they act on (the element a tap hits, the text
typed), not by pixels, so a real device's jitter does not hide a shared prefix.

Probes. Each site goes to a device (`trajforge.recovery.Prober`, `rollout.recovery`). The
device restores the state before `s`, plays the wrong action, and tries escapes. Only a probe
whose escape was observed to bring back the screen of `s`, from where the reference still
succeeds, makes samples:

- "error escape": the observed error screen, with the history plus the wrong action; the
  target is the escape that worked (`press back`, or the wrong tap again where it undoes a
  toggle);
- "back on track": the screen the escape brought back, with the history plus the wrong action
  and the escape; the target is the reference's action.

Every other probe, and every site not probed, is counted with its reason. The report also
counts what the earlier method would have paired on the same rollouts: steps on pixel-identical
screens, with an escape never checked (`coincident_pairs`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from curation.rollouts import Rollout
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import element_at, target_bbox
from trajforge.domain import StepView, describe
from trajforge.logs import counts
from trajforge.recovery import Prober, ProbeResult, RecoverySite
from trajforge.sample import SampleDraft

CATEGORIES = ("error_escape", "back_on_track")
METHOD = "infigui-r1 3.2.3, probed on a device"


@dataclass
class RecoveryReport:
    prone_steps: int = 0  # sites found (query, reference prefix, wrong action)
    probed: int = 0
    samples: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    coincident: int = 0  # pairs the pixel-coincidence method would have made (escape unchecked)
    exclusions: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # sites that made none

    def skip(self, site: RecoverySite, reason: str) -> None:
        """Count a site that made no samples, and keep it with its reason."""
        self.skipped[reason] += 1
        self.exclusions.append((_key(site), reason, _detail(site)))

    def render(self) -> str:
        return (
            f"recovery: {self.prone_steps} prone-to-error sites, {self.probed} probed on a device; "
            f"samples {counts(self.samples)}; skipped {counts(self.skipped)}; "
            f"the pixel-coincidence method would pair {self.coincident}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "prone_steps": self.prone_steps,
            "probed": self.probed,
            "samples": dict(self.samples),
            "skipped": dict(self.skipped),
            "coincident": self.coincident,
        }


def recover(
    groups: dict[str, list[Rollout]], prober: Prober | None, limit: int
) -> tuple[list[SampleDraft], RecoveryReport]:
    """Find the round's prone-to-error sites, probe at most `limit` of them, make the samples."""
    report = RecoveryReport(coincident=coincident_pairs(groups))
    sites = recovery_sites(groups, report)
    report.prone_steps = len(sites)
    if prober is None or limit <= 0:  # recovery not run: counted, and nothing kept as filtered
        report.skipped["no_device" if prober is None else "recovery_off"] += len(sites)
        return [], report
    chosen = _spread(sites, limit)
    for site in sites:
        if site not in chosen:
            report.skip(site, "over_limit")
    report.probed = len(chosen)
    drafts: list[SampleDraft] = []
    for result in prober(chosen):
        if result.reason is not None:
            report.skip(result.site, result.reason)
            continue
        drafts += _pair(result)
        report.samples.update(CATEGORIES)
    return drafts, report


def _key(site: RecoverySite) -> str:
    wrong = hashlib.sha256(site.wrong.to_json().encode()).hexdigest()[:16]
    return f"{site.reference}:{site.step}:{wrong}"


def _detail(site: RecoverySite) -> dict[str, Any]:
    return {
        "query": site.query.uid,
        "episode": site.episode,
        "wrong_action": site.wrong.stored(),
        "source": site.source,
    }


def recovery_sites(groups: dict[str, list[Rollout]], report: RecoveryReport) -> list[RecoverySite]:
    """Where each query's rollouts part from a successful one (see the module docstring). Steps
    whose output did not parse did nothing on the device, and are left out of the comparison."""
    sites: dict[tuple[str, str, str], RecoverySite] = {}
    for group in groups.values():
        played = {r.uid: _played(r) for r in group}
        references = sorted(
            (r for r in group if r.success and played[r.uid]), key=lambda r: (len(r.steps), r.uid)
        )
        for ref in references:
            for other in group:
                if other is ref:
                    continue
                site = _site(ref, played[ref.uid], other, played[other.uid], report)
                if site is not None:
                    sites.setdefault((site.query.uid, str(site.prefix), site.wrong.to_json()), site)
    return list(sites.values())


def _played(r: Rollout) -> list[int]:
    """The indices of a rollout's steps that acted on the device."""
    return [i for i, v in enumerate(r.steps) if v.action is not None]


def _site(
    ref: Rollout, ref_played: list[int], other: Rollout, other_played: list[int], report: RecoveryReport
) -> RecoverySite | None:
    d = 0
    n = min(len(ref_played), len(other_played))
    while d < n and _same_move(ref.steps[ref_played[d]], other.steps[other_played[d]]):
        d += 1
    if d >= n:
        return None
    at = other_played[d]
    harmful = other.labels[at] == "HARMFUL"
    if other.success and not harmful:
        return None  # another way to succeed, not an error
    played = other.steps[at].act  # a played step acted
    assert played is not None
    wrong = played.model_copy(update={"thought": None, "intent": None})
    steps = tuple(ref.steps[i] for i in ref_played)
    source = "harmful" if harmful else "diverged"
    site = RecoverySite(ref.query, ref.uid, steps, d, wrong, other.uid, source, ref_played[d])
    if wrong.kind == ActionKind.TERMINATE:
        report.skip(site, "wrong_action_finishes")  # the episode ends: nothing to escape from
        return None
    return site


def _same_move(a: StepView, b: StepView) -> bool:
    """Two recorded steps make the same move: the same kind on the same element (or text)."""
    x, y = a.act, b.act
    if x is None or y is None:
        return False
    if x.kind != y.kind:
        return False
    if x.point is not None and y.point is not None:
        hit_x = element_at(a.elements, x.point, Screen(a.width, a.height))
        hit_y = element_at(b.elements, y.point, Screen(b.width, b.height))
        if hit_x is not None or hit_y is not None:
            return _visible(hit_x) == _visible(hit_y)
    skip = {"thought", "intent", "point"} if x.point is not None else {"thought", "intent"}
    return x.model_dump(exclude=skip) == y.model_dump(exclude=skip)


def _visible(element: dict[str, Any] | None) -> tuple[Any, ...] | None:
    return None if element is None else (element.get("text"), tuple(element.get("bounds") or ()))


def _spread(sites: list[RecoverySite], limit: int) -> list[RecoverySite]:
    """At most `limit` sites, taken round-robin over queries so no query takes them all."""
    by_query: dict[str, list[RecoverySite]] = {}
    for site in sorted(sites, key=lambda s: (s.query.uid, s.index, s.wrong.to_json())):
        by_query.setdefault(site.query.uid, []).append(site)
    chosen: list[RecoverySite] = []
    queues = list(by_query.values())
    while len(chosen) < limit and any(queues):
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return chosen


def _payload(images: list[str], prompt: str, action: Action, view: StepView) -> dict[str, object]:
    core = action.core()  # what is done, not why
    screen = Screen(view.width, view.height)
    return {
        "images": images,
        "prompt": prompt,
        "action": core.stored(),
        "intent": describe(action, view),  # Mobile-R1's clear low-level action
        "bbox": target_bbox(action, view.elements, screen),
        "screen": [view.width, view.height],
        "response": core.to_json(),
    }


def _pair(result: ProbeResult) -> list[SampleDraft]:
    site, error, escape = result.site, result.error, result.escape
    assert error is not None and escape is not None
    history = [describe(a, v) for a, v in zip(site.prefix, site.steps, strict=False)]
    wrong = describe(site.wrong, error)
    escaped = escape.act
    assert escaped is not None  # an escape that worked was an action
    prov = {
        "episode": site.episode,
        "reference": site.reference,
        "steps": [site.step],
        "query": site.query.uid,
        "wrong_action": error.action,
        "escape": escape.action,
        "observed": {"before": error.before, "error": error.after, "back": escape.after},
        "source": site.source,
        "method": METHOD,
    }
    task = f"Task: {site.query.instruction}\nHistory: "
    here = site.steps[site.index]
    back = StepView.of(here.act, None, escape.after, here.after, here.elements, here.width, here.height)
    return [
        SampleDraft(
            "error_escape",
            site.step,
            _payload([error.after], task + "; ".join([*history, wrong]), escaped, escape),
            prov,
        ),
        SampleDraft(
            "back_on_track",
            site.step,
            _payload(
                [escape.after],
                task + "; ".join([*history, wrong, describe(escaped, escape)]),
                site.correct,
                back,
            ),
            prov,
        ),
    ]


def coincident_pairs(groups: dict[str, list[Rollout]]) -> int:
    """The pairs the earlier method made: per query, a wrong step (HARMFUL) on a screen with the
    same pixels as a right one (GOOD), which moved to a new screen, one per error screen. Counted for
    comparison only: its escape, `press back`, was never checked."""
    pairs = 0
    for group in groups.values():
        by_screen: dict[str, tuple[bool, set[str]]] = {}
        for r in group:
            for i, view in enumerate(r.steps):
                if view.action is None or r.labels[i] == "NEUTRAL":
                    continue
                right, errors = by_screen.get(view.before, (False, set()))
                if r.labels[i] == "GOOD":
                    right = True
                elif view.action.get("kind") != ActionKind.TERMINATE.value and view.after != view.before:
                    errors.add(view.after)
                by_screen[view.before] = (right, errors)
        pairs += sum(len(errors) for right, errors in by_screen.values() if right)
    return pairs


def recovery_line(rec: dict[str, Any]) -> str:
    """The round's error-recovery figures (`RecoveryReport.as_dict`) in one line."""
    skipped = ", ".join(f"{r} {n}" for r, n in sorted(rec["skipped"].items())) or "none"
    return (
        f"{rec['samples'].get('error_escape', 0)} escape pairs observed of {rec['probed']} probes "
        f"({rec['prone_steps']} prone-to-error sites; skipped: {skipped}); the pixel-coincidence "
        f"method would pair {rec['coincident']}"
    )
