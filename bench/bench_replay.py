"""The built-in policy measured apart from the loop: trained checkpoints replayed on held-out queries.

A round's success in `rounds.json` mixes the policy with its sample of new queries, which
moves by several points from round to round. This bench replays the knn checkpoints a run
trained on queries none of them was trained on, in the simulator, with no guidance and no
injected faults, 4 rollouts per query (the first greedy, the others sampled, as in the loop):

- *own round*: round r's checkpoint (trained on rounds 1..r-1) on round r's new queries,
  the loop's success measured again without revisits;
- *fixed set*: every checkpoint on the last round's new queries, which no checkpoint has
  seen. This is a learning curve on one query set; the first trained checkpoint is the
  baseline, and the ratio is against it.

Usage: python -m bench.bench_replay [--home DIR], where DIR is a trajforge home after a run
(e.g. `./.trajforge` after `make run`); nothing is written to it. Without one, the bench first
runs `trajforge evolve --rounds 4` in a temporary folder (about 10 minutes).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
from sqlalchemy import select

from bench.bench_loop import run
from bench.common import table
from evolve.spine import Spine, open_spine
from rollout.policies.knn import NAME as KNN
from rollout.policies.knn import KnnPolicy
from rollout.policies.knn_memory import Memory
from rollout.sim.env import SimEnv
from storage.models import App, Policy, Round
from storage.models import Query as QueryRow
from storage.policies import local_checkpoint
from trajforge.actions import ActionKind
from trajforge.domain import Query
from trajforge.settings import load_settings

ROLLOUTS = 4


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--home {home}"


def new_queries(spine: Spine, number: int) -> list[Query]:
    """The kept queries generated for round `number` (revisits are earlier rounds' queries)."""
    with spine.sessions() as s:
        rnd = s.scalars(select(Round).where(Round.number == number)).one()
        rows = s.execute(
            select(QueryRow, App.name)
            .join(App, App.id == QueryRow.app_id)
            .where(QueryRow.round_id == rnd.id, QueryRow.status == "kept")
            .order_by(QueryRow.id)
        ).all()
    return [q.to_domain(app) for q, app in rows]


def checkpoints(spine: Spine) -> dict[int, tuple[int, Memory]]:
    """Round number -> (knn version, its memory) for every round a trained knn policy rolled out."""
    out: dict[int, tuple[int, Memory]] = {}
    with spine.sessions() as s:
        rows = s.execute(select(Round.number, Policy).join(Policy, Policy.id == Round.policy_id)).all()
    for number, policy in rows:
        if policy.name == KNN and policy.checkpoint_uri:
            out[number] = (policy.version, Memory.load(local_checkpoint(spine, policy.checkpoint_uri)))
    return dict(sorted(out.items()))


def replay(spine: Spine, memory: Memory, queries: list[Query], max_steps: int) -> Counter[str]:
    """Successes and episodes per app (and "all") of `memory` on `queries`."""
    env, frames, vectors = SimEnv(spine.apps), dict[str, bytes](), dict[str, np.ndarray]()
    tally: Counter[str] = Counter()
    for query in queries:
        for k in range(ROLLOUTS):
            policy = KnnPolicy(memory, frames.__getitem__, vectors=vectors)
            policy.start(query, seed=f"replay:{query.uid}:{k}", rollout=k)
            obs = env.reset(query)
            frames[obs.screenshot] = env.last_frame
            success = False
            for _ in range(max_steps):
                action = policy.decide(obs)
                if action.kind == ActionKind.TERMINATE:
                    success = action.status == "success" and env.verify().success
                    break
                obs = env.step(action)
                frames[obs.screenshot] = env.last_frame
            for key in ("all", query.app):
                tally[f"{key}:n"] += 1
                tally[f"{key}:ok"] += success
    return tally


def _rate(tally: Counter[str], key: str) -> str:
    n = tally[f"{key}:n"]
    return f"{tally[f'{key}:ok'] / n:.0%} ({tally[f'{key}:ok']}/{n})" if n else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None, help="a trajforge home after a run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as scratch:
        home = args.home
        if home is None or not (home / "trajforge.db").is_file():
            print(f"running 4 evolve rounds in {scratch} first")
            run(Path(scratch), 4, {})
            home = Path(scratch) / ".trajforge"
        os.environ["TRAJFORGE_HOME"] = str(home.resolve())
        report(open_spine(load_settings()))


def report(spine: Spine) -> None:
    trained = checkpoints(spine)
    if not trained:
        raise SystemExit("the home holds no round rolled out by a trained knn policy; run `trajforge evolve`")
    apps = sorted({a.name for a in spine.apps})
    max_steps = spine.settings.evolve.max_steps
    own = {r: replay(spine, memory, new_queries(spine, r), max_steps) for r, (_, memory) in trained.items()}
    header = ["round", "policy", "all", *apps]
    print(
        table(
            "own round: each round's checkpoint on that round's new queries",
            header,
            [
                [str(r), f"knn@{trained[r][0]}", *(_rate(t, a) for a in ["all", *apps])]
                for r, t in own.items()
            ],
        )
    )
    last = max(trained)
    fixed = new_queries(spine, last)
    curve = {r: replay(spine, memory, fixed, max_steps) for r, (_, memory) in trained.items()}
    first = curve[min(curve)]
    base = first["all:ok"] / max(first["all:n"], 1)
    rows = [
        [
            f"knn@{trained[r][0]}",
            *(_rate(t, a) for a in ["all", *apps]),
            f"{t['all:ok'] / max(t['all:n'], 1) / base:.2f}x" if base else "-",
        ]
        for r, t in curve.items()
    ]
    print(
        table(
            f"fixed set: every checkpoint on round {last}'s new queries (seen by none)",
            ["policy", "all", *apps, "vs first"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
