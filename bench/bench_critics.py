"""Offline critics against the verifier on the data the engine actually produces.

`python -m bench.bench_critics` builds its own data in a temporary home: `trajforge evolve`
for 4 rounds on the simulator (the random explorer, then the trained knn policy of every
round) and `trajforge rollout --backend web` (Chromium) of the noisy oracle on a built-in
app and on docs/examples/pantry.yaml, an app spec the critics were not written for. It then
judges every round again with the current offline critics and prints consensus and
per-channel accuracy against the verifier by round, backend, policy and app, and the learned
critic out of sample: on held-out queries and leave-one-app-out (a MiniWoB++ home: leave one
task out, since each task is an app). Then it hides
the verifier (a person labels a third of each round) and prints how the trusted consensus
decides the rest (`critics.outcome: anchor_else_critic`) against the hidden verdicts.
`python -m bench.bench_critics HOME...` measures existing homes instead (nothing is rolled
out; the databases are copied first, so the homes are left as they were).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from bench.halves import REPORTING, TUNING, app_half
from critics.judge import judge_round
from critics.learned import cross_judge
from critics.outcomes import decide_outcomes
from critics.prior import with_prior
from critics.trained import anchored_truth, leave_one_app_out, seen_episodes, training_rows
from critics.trust import render_trust, trust_table
from rollout.web.env import chromium_available
from storage.anchors import anchors_by_episode, deciding_anchor
from storage.apps import round_apps
from storage.db import create_db_engine, session_factory, upgrade
from storage.models import Anchor, Episode, Judgment, Policy, Round
from storage.models import Query as QueryRow
from storage.objectstore import LocalObjectStore
from trajforge.appspec import load_apps
from trajforge.domain import backend_of
from trajforge.metrics import ChannelStats, kappa_text, rate_text
from trajforge.settings import CriticSettings
from trajforge.verdicts import CONSENSUS

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = ("route_check", "heuristic_visual", "learned_trajectory", CONSENSUS[0])


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "{run}"


def _cli(home: Path, *args: str) -> None:
    env = {**os.environ, "TRAJFORGE_HOME": str(home / ".trajforge")}
    trajforge = Path(sys.executable).with_name("trajforge")
    subprocess.run([str(trajforge), *args], cwd=home, env=env, check=True, stdout=subprocess.DEVNULL)


def build(home: Path) -> None:
    """4 evolve rounds on the simulator, then web rollouts of a built-in app and of a user's app."""
    shutil.copy(ROOT / "docs/examples/pantry.yaml", home / "pantry.yaml")
    (home / "run.yaml").write_text("evolve:\n  rounds: 4\n")
    _cli(home, "evolve", "--config", "run.yaml")
    if not chromium_available():
        print("no Chromium: the web-backend rollouts are left out (apt-get install chromium)")
        return
    for app in ("takeout", "pantry.yaml"):
        web = ("--backend", "web", "--queries", "12", "--rollouts-per-query", "2", "--noise", "0.2")
        _cli(home, "rollout", "--app", app, *web)


def data_dir(home: Path) -> Path:
    """The folder with trajforge.db and objects/: HOME itself (a trajforge home such as
    `.trajforge-miniwob`) or HOME/.trajforge (the folder a run was started in)."""
    for folder in (home, home / ".trajforge"):
        if (folder / "trajforge.db").is_file():
            return folder
    raise SystemExit(
        f"bench_critics: no trajforge.db in {home} or {home / '.trajforge'}; pass a trajforge home "
        "(the folder holding trajforge.db, e.g. .trajforge-miniwob) or the folder a run was started in"
    )


def _copy(home: Path, tmp: str) -> sessionmaker[Session]:
    """The home's database, copied, upgraded, without the offline critics' judgments."""
    db = Path(tmp) / "trajforge.db"
    shutil.copy(data_dir(home) / "trajforge.db", db)
    engine = create_db_engine(f"sqlite:///{db}")
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(delete(Judgment).where(Judgment.critic.in_(OFFLINE)))
    return sessions


def _judge_all(sessions: sessionmaker[Session], home: Path) -> list[tuple[int, int]]:
    with sessions() as s:
        rounds = [
            (rid, number) for rid, number in s.execute(select(Round.id, Round.number).order_by(Round.number))
        ]
    apps = round_apps(sessions, load_apps(()))
    store = LocalObjectStore(data_dir(home) / "objects")
    for round_id, _ in rounds:
        judge_round(sessions, round_id, apps, store)
    return rounds


def measure(home: Path) -> dict[tuple[int, str, str, str], dict[str, ChannelStats]]:
    """Rejudge a copy of the home's database; stats per (round, backend, policy, app) and critic."""
    out: dict[tuple[int, str, str, str], dict[str, ChannelStats]] = defaultdict(dict)
    with tempfile.TemporaryDirectory() as tmp:
        sessions = _copy(home, tmp)
        _judge_all(sessions, home)
        with sessions() as s:
            rows = s.execute(
                select(Episode.id, Round.number, Episode.device, Policy.name, QueryRow.goal)
                .join(Round, Round.id == Episode.round_id)
                .join(Policy, Policy.id == Episode.policy_id)
                .join(QueryRow, QueryRow.id == Episode.query_id)
            ).all()
            anchors = anchors_by_episode(s)
            verdicts: dict[int, list[Judgment]] = defaultdict(list)
            for j in s.scalars(select(Judgment).where(Judgment.target == "episode")):
                verdicts[j.target_id].append(j)
            for episode_id, number, device, policy, goal in rows:
                decided = deciding_anchor(anchors.get(episode_id, []))
                if decided is None:
                    continue
                # a suite task runs in its own environment on the slot of an app device ("sim-0"):
                # its backend is the suite's, not the slot's
                key = (number, str(goal.get("suite") or backend_of(device)), policy, str(goal.get("app")))
                for j in verdicts[episode_id]:
                    if j.critic in OFFLINE[1:] and j.label in ("correct", "incorrect"):
                        out[key].setdefault(j.critic, ChannelStats()).add(
                            j.label == "correct", decided.label == "success"
                        )
    return out


def verifier_free(home: Path, labelled_share: float = 1 / 3) -> str:
    """The farm without a verifier: the verifier's verdicts are hidden, a person labels a share of
    each round's episodes (seeded pick), and the calibrated consensus decides the rest once it
    is trusted (`critics.outcome: anchor_else_critic`, default trust settings). The decided
    outcomes are compared with the hidden verdicts."""
    settings = CriticSettings()
    lines = [f"{'round':>5} {'episodes':>8} {'by human':>8} {'by critic':>9} {'agree':>7} {'queued':>6}"]
    agree_all = decided_all = 0
    with tempfile.TemporaryDirectory() as tmp:
        sessions = _copy(home, tmp)
        with sessions.begin() as s:
            hidden = {
                a.episode_id: a.label for a in s.scalars(select(Anchor).where(Anchor.source == "verifier"))
            }
            s.execute(delete(Anchor))
            for episode_id, uid in s.execute(select(Episode.id, Episode.uid)):
                digest = hashlib.sha256(f"label:{uid}".encode()).digest()[0] / 256
                if episode_id in hidden and digest < labelled_share:
                    s.add(
                        Anchor(
                            episode_id=episode_id, source="human", annotator="bench", label=hidden[episode_id]
                        )
                    )
        tables = []
        for round_id, number in _judge_all(sessions, home):
            with sessions() as s:
                every = decide_outcomes(s, round_id, settings)
                tables += [
                    f"round {number}: the critics' trust table (critics.trust)",
                    *render_trust(trust_table(s, round_id, settings, every)),
                ]
                outcomes = {e: o for e, o in every.items() if e in hidden}
            by = Counter(o.source for o in outcomes.values())
            critic = [(e, o) for e, o in outcomes.items() if o.source == "critic"]
            agree = sum(o.success == (hidden[e] == "success") for e, o in critic)
            agree_all, decided_all = agree_all + agree, decided_all + len(critic)
            queued = len(outcomes) - by["human"] - len(critic)
            share = f"{agree / len(critic):.1%}" if critic else "-"
            lines.append(
                f"{number:>5} {len(outcomes):>8} {by['human']:>8} {len(critic):>9} {share:>7} {queued:>6}"
            )
    if decided_all:
        rate = agree_all / decided_all
        lines.append(
            f"critic-decided outcomes agreeing with the hidden verifier: {rate:.1%} of {decided_all}"
        )
    return "\n".join(lines + tables)


def out_of_sample(home: Path) -> str:
    """The learned critic on episodes it was not fitted on: held-out queries (5 folds by query, as
    the loop judges) and leave-one-app-out (fitted on the other apps only), per app, against the
    deciding anchor; accuracy, precision, recall and Cohen's kappa."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = _copy(home, tmp)
        with sessions() as s:
            seen = seen_episodes(s)
            truth = anchored_truth(s, Episode.id.is_not(None))
            last = s.scalar(select(func.max(Round.id)))
            loao = leave_one_app_out(s, last or 0, every_round=True, seen=seen)
    rows = [e for e in seen if e.episode_id in truth]
    train = with_prior(training_rows(rows, truth))
    held: dict[str, ChannelStats] = defaultdict(ChannelStats)
    for e, p in zip(rows, cross_judge(train, [(e.query, e.app, e.features) for e in rows]), strict=True):
        if p.success is not None:
            held[e.app].add(p.success, truth[e.episode_id])
    summaries = {app: st.summary() for app, st in held.items()}
    lines = [
        f"{'learned critic, out of sample':40} {'half':9} {'n':>5} {'accuracy':>9} {'precision':>9} "
        f"{'recall':>7} {'kappa':>9}"
    ]
    for title, by_app in (("held-out queries", summaries), ("leave one app out", loao)):
        pooled = {
            f"{half} half": ChannelStats.pooled(st for app, st in by_app.items() if app_half(app) == half)
            for half in (REPORTING, TUNING)
        }  # the reporting half first: the figure that counts
        shown = {k: st.summary() for k, st in pooled.items() if st.n} | dict(sorted(by_app.items()))
        for app, st in shown.items():
            half = app.split()[0] if app.endswith(" half") else app_half(app)
            lines.append(
                f"{title + ': ' + app:40} {half:9} {st['n']:>5} {st['accuracy']:>9.1%} "
                f"{rate_text(st, 'precision'):>9} {rate_text(st, 'recall'):>7} {kappa_text(st['kappa']):>9}"
            )
    return "\n".join(lines)


def render(stats: dict[tuple[int, str, str, str], dict[str, ChannelStats]]) -> str:
    lines = [
        f"{'round':>5} {'backend':8} {'policy':16} {'app':9} {'half':9} {'n':>4} {'consensus':>9} "
        f"{'learned':>8} {'visual':>13}"
    ]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key in sorted(stats):
        number, backend, policy, app = key
        by = {c: s.summary() for c, s in stats[key].items()}
        cons = by.get(CONSENSUS[0], {"n": 0, "accuracy": 0.0})
        text = by.get("learned_trajectory", {"accuracy": 0.0})
        vis = by.get("heuristic_visual")
        visual = f"{vis['accuracy']:6.1%} ({vis['n']:>3})" if vis else "   abstained"
        lines.append(
            f"{number:>5} {backend:8} {policy:16} {app:9} {app_half(app):9} {cons['n']:>4} "
            f"{cons['accuracy']:>9.1%} "
            f"{text['accuracy']:>8.1%} {visual:>13}"
        )
        for group in (f"round {number} {backend}", f"backend {backend}", f"policy {policy}", app_half(app)):
            totals[group][0] += round(cons["accuracy"] * cons["n"])
            totals[group][1] += int(cons["n"])
    lines.append("consensus accuracy against the verifier:")
    lines += [f"  {g:24} {r / n:6.1%} of {n}" for g, (r, n) in sorted(totals.items()) if n]
    return "\n".join(lines)


def main() -> None:
    homes = [Path(a) for a in sys.argv[1:]]
    if not homes:
        tmp = Path(tempfile.mkdtemp(prefix="bench-critics-"))
        build(tmp)
        homes = [tmp]
    for home in homes:
        print(f"== {home}")
        print(render(measure(home)))
        print(out_of_sample(home))
        print(
            "verifier-free (a person labels a third of each round; the trusted consensus decides the rest):"
        )
        print(verifier_free(home))


if __name__ == "__main__":
    main()
