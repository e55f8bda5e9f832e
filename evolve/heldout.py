"""Held-out evaluation, and the gate a trained policy passes before it rolls out the next round.

A round's success (`success_rate` in `rounds.json`) is its policy on that round's new queries,
which differ every round: it moves by several points with its sample alone. The held-out set
is one fixed set of queries per app (`evolve.heldout_per_app`), sampled once, when a policy is
first evaluated, from a seed apart from the rounds' and stored with no round (meta `heldout`).
The query deduper reads stored queries as its history, so no round samples one of them again:
no policy is trained on them. Every policy is rolled out on the set `evolve.heldout_rollouts`
times per query (the first greedy) on the loop's farm (sim or web), with the same episode
seeds, and nothing is stored but the figures, in the policy row's `meta.heldout`, keyed by the
set and the rollout settings (a policy is evaluated once per set).

The gate (`evolve.promote: gate`): after round N trains its candidate, the candidate is
evaluated beside round N's policy; it rolls out round N + 1 when its held-out success is at
least that policy's and it loses no app (or suite task) by more than `evolve.gate_app_margin`,
neither against that policy nor against round 1's (the random explorer: no promoted policy does
worse on a task than the explorer did, or the gate says so: `below_round_1_policy` when it keeps
the candidate back, `below_round_1` beside a promotion whose loss is within the margin). A
candidate that lost tasks (beyond the margin against the current policy, or at all against round
1's) is registered again with each of them handed to whichever of those two did better there
(`<name>+routed`, `rollout.policies.routed`), measured on the held-out set, and promoted when that
passes the gate (`evolve.route_lost_apps`; `routed`), a candidate worse overall too, unless every
task would be handed over.
Else round N's policy rolls out again, round N + 1's data joins the dataset, and round N + 1
trains a new candidate on all of it. Outcomes the farm cannot verify
(`unknown`) count for neither; a farm that verifies none promotes every candidate, with that
reason stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from evolve.spine import Spine
from querygen.pipeline import generate_queries, load_history, store_generation
from rollout.loop import open_farm, open_pool
from rollout.runner import EpisodeRunner, RolloutConfig
from rollout.suites.queries import environment_queries, heldout_seeds
from rollout.versions import policy_factory
from storage.db import transaction
from storage.models import App, Round
from storage.models import Policy as PolicyRow
from storage.models import Query as QueryRow
from storage.policies import register_policy
from trajforge.domain import Query
from trajforge.endpoints import charge_round
from trajforge.errors import ConfigError, DeviceError
from trajforge.stage import DEVICES, MODEL_CALLS, Facts, Given, Stage

log = logging.getLogger("trajforge.heldout")

SEED_OFFSET = 1_000_003  # the held-out set's sampling seed is evolve.seed + this: apart from every round's
LABEL = "heldout"


def heldout_queries(spine: Spine) -> list[Query]:
    """The held-out set: per app, the first `heldout_per_app` stored held-out queries, sampled and
    stored (beside every query kept so far) when there are fewer."""
    ev = spine.settings.evolve
    out: list[Query] = []
    for spec in spine.apps:
        have = _stored(spine, spec.name)
        if len(have) < ev.heldout_per_app:
            coverage, dedup = load_history(spine.sessions, spec.name)
            report = generate_queries(
                spec, ev.heldout_per_app - len(have), seed=ev.seed + SEED_OFFSET + len(have),
                coverage=coverage, deduper=dedup,
            )  # fmt: skip
            store_generation(spine.sessions, spec, report, meta={LABEL: True})
            have = _stored(spine, spec.name)
        out.extend(have[: ev.heldout_per_app])
    stored = {app: _stored(spine, app) for app in spine.suites}  # fixed seeds, beyond every round's
    wanted = {
        app: heldout_seeds(len(have), ev.heldout_per_app - len(have))
        for app, have in stored.items()
        if len(have) < ev.heldout_per_app
    }
    if wanted:  # one environment per suite words them all
        environment_queries(spine.sessions, spine.suites, wanted, meta={LABEL: True})
        stored |= {app: _stored(spine, app) for app in wanted}
    return out + [q for have in stored.values() for q in have[: ev.heldout_per_app]]


def _stored(spine: Spine, app: str) -> list[Query]:
    with spine.sessions() as s:
        rows = s.scalars(
            select(QueryRow)
            .join(App, App.id == QueryRow.app_id)
            .where(App.name == app, QueryRow.round_id.is_(None), QueryRow.status == "kept")
            .order_by(QueryRow.id)
        ).all()
    return [row.to_domain(app) for row in rows if (row.meta or {}).get(LABEL)]


def set_key(spine: Spine, queries: list[Query]) -> str:
    """What makes two evaluations comparable: the queries, the rollouts, the step budget, the farm."""
    ev = spine.settings.evolve
    what = [sorted(q.uid for q in queries), ev.heldout_rollouts, ev.max_steps, ev.backend]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def evaluate_policy(spine: Spine, policy_id: int, queries: list[Query]) -> dict[str, Any]:
    """The policy's held-out figures: episodes, successes, unknown outcomes, success rate (of the
    decided episodes) and [successes, episodes] per app; computed once per set and stored."""
    key = set_key(spine, queries)
    with spine.sessions() as s:
        row = s.get(PolicyRow, policy_id)
        assert row is not None
        cached = (row.meta or {}).get(LABEL)
    if cached and cached.get("key") == key:
        return dict(cached)
    ev = spine.settings.evolve
    farm = open_farm(spine)
    config = RolloutConfig(rollouts_per_query=ev.heldout_rollouts, workers=ev.devices, max_steps=ev.max_steps)
    runner = EpisodeRunner(
        spine.sessions, open_pool(spine), farm, policy_factory(spine, policy_id), config,
        backend=farm.backend,
    )  # fmt: skip
    played = asyncio.run(runner.evaluate(queries, LABEL))
    outcomes = Counter(outcome for _, _, outcome in played)
    if outcomes["not_run"]:
        raise DeviceError(
            f"{outcomes['not_run']} held-out episodes found no free device within {config.lease_wait_s:g}s; "
            "rerun (nothing of the evaluation is stored until it is complete)"
        )
    per_app: dict[str, list[int]] = {}
    for query, _, outcome in played:
        if outcome != "unknown":
            tally = per_app.setdefault(query.app, [0, 0])
            tally[0] += outcome == "success"
            tally[1] += 1
    decided = outcomes["success"] + outcomes["failure"]
    figures = {
        "key": key,
        "episodes": len(played),
        "successes": outcomes["success"],
        "unknown": outcomes["unknown"],
        "success_rate": outcomes["success"] / decided if decided else None,
        "per_app": dict(sorted(per_app.items())),
    }
    with transaction(spine.sessions) as s:
        row = s.get(PolicyRow, policy_id)
        assert row is not None
        row.meta = {**(row.meta or {}), LABEL: figures}
    return figures


def gate(spine: Spine, incumbent_id: int, candidate_id: int) -> dict[str, Any]:
    """Whether the candidate rolls out the next round: the decision, its reason and both figures. A
    candidate that lost tasks may roll out with them handed to the policies that did better (`routed`),
    unless that would hand over every task."""
    ev = spine.settings.evolve
    if ev.promote == "always":
        return {"promoted": True, "reason": "promote_always"}
    if ev.heldout_per_app == 0:
        return {"promoted": True, "reason": "no_heldout_set"}
    queries = heldout_queries(spine)
    current = evaluate_policy(spine, incumbent_id, queries)
    candidate = evaluate_policy(spine, candidate_id, queries)
    figures = {"current": current, "candidate": candidate}
    if candidate["success_rate"] is None:
        log.warning("the farm verified no held-out episode; promoting the candidate unchecked")
        return {"promoted": True, "reason": "unverifiable", **figures}
    first, floor = first_policy(spine), None
    if first == incumbent_id:
        floor = current
    elif first is not None and first != candidate_id:
        floor = evaluate_policy(spine, first, queries)  # cached: round 1's gate evaluated it
    refused = _refusal(current, floor, candidate, ev.gate_app_margin)
    # below round 1's policy on a task (by no more than the margin, if promoted): said, not hidden
    below = apps_lost(floor, candidate, (0, 0.0)) if floor is not None else {}
    said = {"apps_lost": refused[1]} if refused and refused[1] else {}
    said |= {"below_round_1": below} if below else {}
    handed = _handed(refused, below, current, floor, incumbent_id, first)
    if handed and len(handed) < len(candidate["per_app"]) and ev.route_lost_apps:  # some tasks stay its
        routed = route_lost(spine, candidate_id, handed, queries)
        better = refused or routed["figures"]["success_rate"] >= candidate["success_rate"]
        if better and not _refusal(current, floor, routed["figures"], ev.gate_app_margin):
            return {"promoted": True, "reason": "heldout_not_worse", **said, "routed": routed, **figures}
    if refused:
        return {"promoted": False, "reason": refused[0], **said, **figures}
    return {"promoted": True, "reason": "heldout_not_worse", **said, **figures}


Lost = dict[str, list[int]]


def _refusal(
    current: dict[str, Any],
    floor: dict[str, Any] | None,
    candidate: dict[str, Any],
    margin: tuple[int, float],
) -> tuple[str, Lost] | None:
    """Why the gate refuses `candidate` (reason, apps lost), or None: worse overall than the current
    policy, or an app lost by more than the margin against it or against round 1's policy."""
    rate, now = candidate["success_rate"], current["success_rate"]
    lost = apps_lost(current, candidate, margin)
    if rate is None or (now is not None and rate < now):
        return ("heldout_regression", lost)
    if lost:
        return ("heldout_app_regression", lost)
    if floor is not None and (lost := apps_lost(floor, candidate, margin)):
        return ("below_round_1_policy", lost)
    return None


def _handed(
    refused: tuple[str, Lost] | None,
    below: Lost,
    current: dict[str, Any],
    floor: dict[str, Any] | None,
    incumbent_id: int,
    first: int | None,
) -> dict[str, int]:
    """app -> the policy to hand it to: each app the candidate lost beyond the margin, or below round 1
    at all, goes to whichever of the current policy and round 1's won more of its held-out episodes."""
    apps = sorted({*(refused[1] if refused else {}), *below})
    if floor is None or first is None:
        return {app: incumbent_id for app in apps}
    won = {pid: f["per_app"] for pid, f in ((incumbent_id, current), (first, floor))}
    return {app: max(won, key=lambda pid: won[pid].get(app, [0, 0])[0]) for app in apps}


def route_lost(
    spine: Spine, candidate_id: int, handed: dict[str, int], queries: list[Query]
) -> dict[str, Any]:
    """The candidate registered again (`<name>+routed`, its version) with each app of `handed` given to
    that policy (to the one acting there, when that is routed itself), and measured on the held-out set:
    its id, the apps with their policies, its figures."""
    with transaction(spine.sessions) as s:
        row = s.get(PolicyRow, candidate_id)
        assert row is not None
        handed = {app: _acting(s, pid, app) for app, pid in handed.items()}
        routes = {"base": candidate_id, "apps": handed}
        routed_id = register_policy(
            s, f"{row.name}+routed", row.version, {"routes": routes}, parent_id=candidate_id
        )
        names = {pid: f"{p.name}@{p.version}" for pid in set(handed.values()) if (p := s.get(PolicyRow, pid))}
    figures = evaluate_policy(spine, routed_id, queries)
    apps = {app: names[pid] for app, pid in handed.items()}
    return {"policy_id": routed_id, "apps": apps, "figures": figures}


def _acting(s: Session, policy_id: int, app: str) -> int:
    """The policy that acts on `app` for `policy_id`: through its routes when it has some, so routed
    policies do not nest round after round."""
    while (row := s.get(PolicyRow, policy_id)) is not None and (routes := (row.meta or {}).get("routes")):
        policy_id = int(routes["apps"].get(app, routes["base"]))
    return policy_id


def first_policy(spine: Spine) -> int | None:
    """The policy that rolled out round 1 (the random explorer, unless a checkpoint was configured):
    the floor no promoted policy may fall below on any app, by more than the margin."""
    with spine.sessions() as s:
        return s.scalars(select(Round.policy_id).where(Round.number == 1)).first()


def apps_lost(
    current: dict[str, Any], candidate: dict[str, Any], margin: tuple[int, float]
) -> dict[str, list[int]]:
    """The apps on which the candidate wins fewer held-out episodes than the current policy by more
    than the margin (the larger of `margin[0]` episodes and `margin[1]` points of the app's
    episodes): app -> [current successes, candidate successes, episodes]. A better overall rate
    can hide a task the candidate gave up on."""
    lost = {}
    for app, (won, n) in current["per_app"].items():
        now = candidate["per_app"].get(app, [0, n])[0]
        if won - now > max(margin[0], margin[1] / 100 * n):
            lost[app] = [won, now, n]
    return lost


def heldout_line(stats: dict[str, Any]) -> str:
    """One line of a finished round: its policy on the held-out set, and the gate's decision."""
    parts = []
    if own := stats.get("heldout"):
        parts.append(f"policy {_rate(own)}")
    if decision := stats.get("promotion"):
        verdict = "promoted" if decision["promoted"] else "kept the current policy"
        candidate = f"candidate {_rate(decision['candidate'])} " if "candidate" in decision else ""
        lost = _losses(decision.get("apps_lost", {}))
        below = _losses(decision.get("below_round_1", {})) if decision["promoted"] else ""
        lost_text = ("; the candidate lost " if decision["promoted"] else ": ") + lost if lost else ""
        within = "" if lost else " within the margin"  # a routed candidate may have lost more
        said = f"{lost_text}{f'; below round 1{within}: ' + below if below else ''}"
        if routed := decision.get("routed"):
            said += f"; {_handed_text(routed['apps'])}: {_rate(routed['figures'])}"
        parts.append(f"{candidate}-> {verdict} ({decision['reason']}{said})")
    return "; ".join(parts)


def _handed_text(apps: dict[str, str]) -> str:
    """ "handed to P: A, B; to Q: C", the tasks grouped by the policy they went to."""
    by_policy: dict[str, list[str]] = {}
    for app, policy in apps.items():
        by_policy.setdefault(policy, []).append(app)
    return "handed " + "; ".join(f"to {policy}: {', '.join(tasks)}" for policy, tasks in by_policy.items())


def _losses(apps: dict[str, list[int]]) -> str:
    return ", ".join(f"{a} {w}->{c}/{n}" for a, (w, c, n) in apps.items())


def _rate(figures: dict[str, Any]) -> str:
    rate = figures["success_rate"]
    per_app = ", ".join(f"{app} {won}/{n}" for app, (won, n) in figures["per_app"].items())
    shown = "unverified" if rate is None else f"{rate:.0%}"
    return f"{shown} ({figures['successes']}/{figures['episodes'] - figures['unknown']}; {per_app})"


def promote(spine: Spine, number: int, _given: Given) -> Facts:
    """Choose round `number + 1`'s policy: the candidate trained after this round when the gate
    lets it through (`gate`), else this round's policy again. Decided once."""
    with spine.sessions() as s:
        rnd = s.scalars(select(Round).where(Round.number == number)).one()
    stats = dict(rnd.stats or {})
    if "next_policy_id" in stats:
        decision = dict(stats.get("promotion") or {"promoted": True, "reason": "decided_before_the_gate"})
    else:
        if "candidate_policy_id" not in stats:
            raise ConfigError(
                f"round {number} has not trained a candidate policy yet; run `trajforge evolve` to finish it"
            )
        candidate = int(stats["candidate_policy_id"])
        with charge_round(rnd.id):  # the held-out episodes' model calls are this round's
            decision = gate(spine, rnd.policy_id, candidate)
        promoted = decision.get("routed", {}).get("policy_id", candidate)
        stats |= {
            "next_policy_id": promoted if decision["promoted"] else rnd.policy_id,
            "promotion": decision,
        }
        with transaction(spine.sessions) as s:
            row = s.scalars(select(Round).where(Round.number == number)).one()
            row.keep(stats)
    with spine.sessions() as s:
        chosen = s.get(PolicyRow, stats["next_policy_id"])
        assert chosen is not None
    promoted = {**decision, "policy": f"{chosen.name}@{chosen.version}", "policy_id": chosen.id}
    return Facts(promoted, f"next policy {promoted['policy']} ({promoted.get('reason', '')})")


PROMOTE: Stage[Spine] = Stage(
    "promote",
    "promote-policy",
    promote,
    reads=("policy", "query"),
    writes=("policy", "round"),
    after=("train",),
    tags=(DEVICES, MODEL_CALLS),
)
