"""The label-error rule on real judges' verdicts (issue 91 item 4): how much it decides, how right.

Replays a JSONL of rows `{task_id, traj_id, judge, verdict, confidence, label}` (confidence may be
null) through the code the loop runs: each judge is a channel of the calibrated consensus
(`critics.consensus.Evidence`), the error rule decides (`critics.error_control.decide`), and the
labels are revealed only where the label queue asks for them (`critics.error_control.teaching_order`),
one a task at a time, at most `--labels` (8) a task. Printed per task, then pooled on the line that
starts `pooled`: coverage of the unlabelled, how right what it decided was (`right`), precision and
NPV, each with its Wilson 95% interval; the error the rule claimed; and the hindsight ceiling (the
most that could be decided at the target knowing the truth, in whole cells of the rule). Then the
same with the labels drawn at random within each task (`--trials` draws), for the queue's order.

The default data, `bench/data/agentrewardbench_webjudge.jsonl.gz`, is AgentRewardBench's web
trajectories (WebArena, VisualWebArena, WorkArena, WorkArena++, AssistantBench; four agents; expert
labels) judged by three WebJudge models (o4-mini, GPT-4o, 7B), as published in the repository
unclevikram/TripMind (MIT; the data CC-BY-4.0; `bench/data/README.md`). A task is benchmark x agent.
`--half tuning` keeps WebArena and WorkArena (and WorkArena++), where the rule's settings were chosen:
figures there are in-sample. `--half reporting` keeps VisualWebArena and AssistantBench.

Usage: python -m bench.judges_real [--data FILE] [--half all|tuning|reporting] [--target 0.05]
       [--labels 8] [--trials 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import rate_shown
from critics.consensus import Anchored
from critics.error_control import Decision, Judged, ceiling, decide, judge_episodes, teaching_order
from trajforge.metrics import ChannelStats

DATA = Path(__file__).parent / "data" / "agentrewardbench_webjudge.jsonl.gz"
HALVES = {
    "tuning": ("webarena", "workarena", "workarena++"),
    "reporting": ("visualwebarena", "assistantbench"),
}
MINIMUM = 10  # critics.calibration_min_anchored's default

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--half tuning --labels 2 --trials 1"


@dataclass(frozen=True)
class Trajectory:
    episode: Anchored  # the judges' votes and the human label
    confidence: dict[str, float]  # a judge's confidence in its verdict, where given


def load(path: Path, half: str) -> list[Trajectory]:
    """The file's trajectories (of `half`), in the file's order; one clear error for a bad row."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    votes: dict[str, dict[str, bool]] = {}
    labels: dict[str, tuple[str, bool]] = {}
    confidence: dict[str, dict[str, float]] = defaultdict(dict)
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                task, traj, judge = str(row["task_id"]), str(row["traj_id"]), str(row["judge"])
                verdict, label = bool(int(row["verdict"])), bool(int(row["label"]))
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(
                    f"error: {path}:{number}: not a row {{task_id, traj_id, judge, verdict, confidence, "
                    f"label}} ({e}); fix or remove the line"
                ) from None
            if half != "all" and task.split("/")[0] not in HALVES[half]:
                continue
            votes.setdefault(traj, {})[judge] = verdict
            labels[traj] = (task, label)
            if row.get("confidence") is not None:
                confidence[traj][judge] = float(row["confidence"])
    return [
        Trajectory(Anchored(i, labels[t][0], votes[t], labels[t][1]), confidence[t])
        for i, t in enumerate(votes)
    ]


def replay(
    trajectories: list[Trajectory], target: float, labels: int, choose: str, seed: int
) -> tuple[Decision, list[Judged], set[int]]:
    """Reveal labels a task at a time (the queue's choice, or at random), then decide."""
    episodes = [t.episode for t in trajectories]
    by_task: dict[str, list[int]] = defaultdict(list)
    for a in episodes:
        by_task[a.app].append(a.episode_id)
    known: set[int] = set()
    rng = random.Random(seed)
    for _ in range(labels):
        judged = judge_episodes(episodes, known, MINIMUM)
        order = teaching_order(judged, target, seed) if choose == "queue" else []
        for task in sorted(by_task):
            left = [e for e in by_task[task] if e not in known]
            if not left:
                continue
            if choose == "queue":
                rank = {e: i for i, e in enumerate(order)}
                known.add(min(left, key=lambda e: rank.get(e, len(rank) + e)))
            else:
                known.add(rng.choice(sorted(left)))
    judged = judge_episodes(episodes, known, MINIMUM)
    return decide(judged, target), judged, known


def scored(
    decision: Decision, judged: list[Judged], actual: dict[int, bool], tasks: list[str]
) -> dict[str, tuple[ChannelStats, int]]:
    """Per task and pooled: the decided verdicts against the truth, and the unlabelled count."""
    out: dict[str, tuple[ChannelStats, int]] = {}
    for key in [*tasks, "pooled"]:
        out[key] = (ChannelStats(), 0)
    for j in judged:
        if j.right is not None:
            continue
        for key in (j.task, "pooled"):
            st, n = out[key]
            out[key] = (st, n + 1)
            if j.episode_id in decision.decided:
                st.add(j.success, actual[j.episode_id])
    return out


def line(name: str, st: ChannelStats, unlabelled: int, claimed: str, ceil: int) -> str:
    return (
        f"{name:42} coverage {rate_shown(st.n, unlabelled):22} right {rate_shown(st.tp + st.tn, st.n):22} "
        f"precision {rate_shown(st.tp, st.tp + st.fp):22} npv {rate_shown(st.tn, st.tn + st.fn):22} "
        f"claimed {claimed:>6} ceiling {ceil / unlabelled if unlabelled else 0:.0%}"
    )


def report(trajectories: list[Trajectory], target: float, labels: int, choose: str, seed: int) -> str:
    decision, judged, known = replay(trajectories, target, labels, choose, seed)
    actual = {t.episode.episode_id: t.episode.actual for t in trajectories}
    tasks = sorted({t.episode.app for t in trajectories})
    ceilings = ceiling(judged, actual, target)
    rows = scored(decision, judged, actual, tasks)
    out = []
    for key, (st, n) in rows.items():
        claimed = f"{decision.claimed:.1%}" if key == "pooled" and decision.claimed is not None else ""
        out.append(line(key, st, n, claimed, ceilings.get(key, 0)))
    out.append(f"labels {len(known)} ({choose})")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--half", choices=["all", *HALVES], default="all")
    ap.add_argument("--target", type=float, default=0.05, help="critics.max_label_error")
    ap.add_argument("--labels", type=int, default=8, help="labels a task, at most")
    ap.add_argument("--trials", type=int, default=5, help="random draws of the labels to compare")
    args = ap.parse_args()
    trajectories = load(args.data, args.half)
    if not trajectories:
        raise SystemExit(f"error: {args.data} holds no trajectory of half {args.half!r}; pass --half all")
    print(
        f"{len(trajectories)} trajectories, {len({t.episode.app for t in trajectories})} tasks, "
        f"target {args.target:.0%}, at most {args.labels} labels a task"
    )
    print("labels chosen by the queue:")
    print(report(trajectories, args.target, args.labels, "queue", 0))
    for trial in range(args.trials):
        print(f"labels at random, draw {trial + 1}:")
        print(report(trajectories, args.target, args.labels, "random", trial + 1).splitlines()[-2])


if __name__ == "__main__":
    main()
