"""The smoke round: the smallest real thing the engine does end to end, without training.

For every built-in app it samples new task queries on the app's navigation graph, then
rolls them out with the noisy oracle on a small farm of simulated devices through the
episode runner. The oracle's mistakes are seeded: format errors (kept as data with their
reason), wrong list picks, mis-taps and early stops, so some episodes fail. Screenshots
are stored once by hash; steps, verifier anchors and every dropped item are written in
bulk. The smoke round plays its own policy, so it wires its queries and rollout itself and keeps
the rollout's report as the rollout stage does; judging, calibration with the CSRS extraction,
and curation are the loop's own stages, run by the one stage runner (`evolve.stages.run_stage`),
so the round is recorded as having been through them and can be published.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from critics.csrs import ExtractionReport
from critics.stages import CALIBRATE, JUDGE, Calibrated, Judged
from curation.pipeline import CurationReport
from curation.stages import CURATE, Curated
from evolve.lifecycle import close_round, open_round
from evolve.spine import new_spine
from evolve.stages import in_order, run_stage
from querygen.pipeline import generate_queries, load_history, store_generation
from rollout.loop import play
from rollout.policies import NoisyOracle, OracleNoise
from rollout.pool import DevicePool
from rollout.runner import RolloutConfig, RolloutReport
from rollout.sim.farm import SimFarm
from rollout.stages import ROLLOUT, rolled
from storage.db import transaction
from storage.models import App, Episode, Step
from storage.models import Query as QueryRow
from storage.policies import register_policy
from storage.rounds import record
from trajforge.appspec import builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.logs import redact_url
from trajforge.settings import Settings

NOISE = OracleNoise(malformed=0.08, wrong_value=0.05, mis_tap=0.03, premature_terminate=0.03)
DEVICES = 2
ROLLOUTS = 4  # per query: pass rates, guidance and error-recovery need groups


@dataclass
class SmokeReport:
    round_number: int
    db_url: str
    store: str
    queries: Counter[str] = field(default_factory=Counter)
    episodes: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    rollout: RolloutReport = field(default_factory=RolloutReport)
    frames_written: int = 0
    frames_deduped: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    calibration: dict[str, float | int] = field(default_factory=dict)
    samples: ExtractionReport = field(default_factory=ExtractionReport)
    curation: CurationReport = field(default_factory=CurationReport)

    def render(self) -> str:
        total, ok = sum(self.episodes.values()), sum(self.successes.values())
        per_app = ", ".join(f"{a} {self.successes[a]}/{n}" for a, n in sorted(self.episodes.items()))
        return "\n".join(
            [
                f"round {self.round_number}: {sum(self.queries.values())} new queries, {total} episodes, "
                f"{ok} verified successful ({ok / max(total, 1):.0%}), {self.rollout.steps} steps",
                f"per app: {per_app}",
                f"screenshots: {self.frames_written} stored, "
                f"{self.frames_deduped} already there (deduplicated by sha256)",
                "step labels (route check): " + ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items())),
                f"critic consensus vs verifier: {self.calibration.get('accuracy', 0.0):.0%} accurate "
                f"on {self.calibration.get('n', 0)} episodes",
                f"training samples (CSRS): {sum(self.samples.kept.values())} kept, "
                f"{sum(self.samples.dropped.values())} dropped",
                "dropped: "
                + (
                    ", ".join(
                        f"{k}={v}" for k, v in sorted((self.reasons + Counter(self.samples.dropped)).items())
                    )
                    or "none"
                ),
                "curation:",
                *("  " + line for line in self.curation.render().splitlines()),
                f"database: {self.db_url}",
                f"objects:  {self.store}",
            ]
        )


def run_smoke_round(settings: Settings, queries_per_app: int = 2, rollouts: int = ROLLOUTS) -> SmokeReport:
    """One round on the configured database and object store; each call is the next round. It
    goes through the loop's own stages (`critics.stages`, `curation.stages`), the noisy oracle
    as policy."""
    spine = new_spine(settings)
    farm = SimFarm(store=spine.store)
    pool = DevicePool(spine.sessions)
    farm.register(pool, DEVICES)
    with transaction(spine.sessions) as s:
        policy_id = register_policy(s, "noisy-oracle", 0, meta=NOISE.model_dump())
        rnd = open_round(s, policy_id)
        round_id, number = rnd.id, rnd.number
    report = SmokeReport(number, redact_url(settings.db_url), settings.store_where)
    queries: list[Query] = []
    for name in builtin_app_names():
        spec = load_app(name)
        coverage, dedup = load_history(spine.sessions, name)
        generated = generate_queries(spec, queries_per_app, seed=number, coverage=coverage, deduper=dedup)
        store_generation(spine.sessions, spec, generated, round_id=round_id)
        report.queries[name] += len(generated.kept)
        report.reasons.update(generated.reasons())
        queries.extend(generated.kept)
    config = RolloutConfig(workers=DEVICES, max_steps=30, rollouts_per_query=rollouts)
    policy = partial(NoisyOracle, NOISE)
    report.rollout, runner = play(
        spine, farm, pool, round_id, policy_id, queries, policy, config, backend=None
    )
    report.frames_written = sum(getattr(env, "frames_written", 0) for env in runner.environments())
    report.frames_deduped = sum(getattr(env, "frames_deduped", 0) for env in runner.environments())
    _count(spine.sessions, round_id, report)
    record(spine.sessions, number, ROLLOUT.name, rolled(report.rollout))
    kept: list[object] = []
    for stage in (JUDGE, CALIBRATE, CURATE):
        run_stage(spine, stage, number, {}, in_order(spine, kept.append))
    judged, calibrated, curated = kept
    assert isinstance(judged, Judged) and isinstance(calibrated, Calibrated) and isinstance(curated, Curated)
    report.labels.update(judged.offline.steps)
    report.calibration, report.samples = calibrated.consensus, calibrated.samples
    report.curation = curated.report
    stats = {
        "episodes": report.rollout.completed,
        "successes": report.rollout.successes,
        "steps": report.rollout.steps,
        "dropped": dict(report.reasons),
    }
    close_round(spine, number, stats)
    return report


def _count(sessions: sessionmaker[Session], round_id: int, report: SmokeReport) -> None:
    """The round's tallies: parse errors by reason, episodes and successes per app."""
    with sessions() as s:
        errors = s.scalars(
            select(Step.parse_error)
            .join(Episode, Episode.id == Step.episode_id)
            .where(Episode.round_id == round_id, Step.parse_error.is_not(None))
        ).all()
        report.reasons.update(e for e in errors if e)
        per_app = s.execute(
            select(App.name, Episode.outcome, func.count())
            .join(QueryRow, QueryRow.id == Episode.query_id)
            .join(App, App.id == QueryRow.app_id)
            .where(Episode.round_id == round_id)
            .group_by(App.name, Episode.outcome)
        ).all()
    for app, outcome, n in per_app:
        report.episodes[app] += n
        if outcome == "success":
            report.successes[app] += n
