"""`curate_round`: a judged round's rollouts and samples turned into curated training material.

In order: trajectory dedup (features cached by screenshot hash, faiss per query group,
seeded with what earlier rounds retained); query-specific guidance for the hard
queries; thoughts for the accepted steps; error-recovery samples; annotators'
corrections (which supersede the model's action samples of those steps); balancing of
everything the round kept; pass-rate labels and the zero-pass hold-out
(`curation.curriculum`). Every stage writes idempotently, so a rerun changes nothing,
and every drop is kept with its reason: dropped episodes in `exclusion` (stage dedup),
dropped samples with their reason on the `sample` row and in `exclusion`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from curation import balance as balancing
from curation.corrections import correction_samples, supersede
from curation.curriculum import ZERO_PASS, CurriculumReport, label_and_hold
from curation.dedup import Decision, DedupReport, Trajectory, dedup, embed_frames
from curation.guidance import Demonstrator, GuidanceReport, write_guidance
from curation.overlays import GreyThumbs
from curation.recovery import RecoveryReport, recover
from curation.rollouts import Rollout, by_query, load_rollouts, pass_rate
from curation.thoughts import StepAt, ThoughtReport, synthesise
from storage.db import record_exclusions, transaction
from storage.features import CacheStats, FeatureStore, dedup_threshold, make_featurizer
from storage.models import Episode, Exclusion, Sample, Step
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore, frame_reader
from storage.samples import CATEGORIES, store_drafts
from trajforge.features import Featurizer
from trajforge.gateway import LLMGateway, closing
from trajforge.logs import counts
from trajforge.recovery import Prober
from trajforge.sample import SampleDraft
from trajforge.settings import CurationSettings
from trajforge.verdicts import Outcome

DEDUP_STAGE = "dedup"


@dataclass
class CurationReport:
    dedup: DedupReport = field(default_factory=DedupReport)
    cache: CacheStats = field(default_factory=CacheStats)
    featurizer: str = ""  # the cache key of the screenshot features dedup used
    threshold: float = 0.0  # the cosine above which dedup called a duplicate
    guidance: GuidanceReport = field(default_factory=GuidanceReport)
    thoughts: ThoughtReport = field(default_factory=ThoughtReport)
    recovery: RecoveryReport = field(default_factory=RecoveryReport)
    balance: balancing.BalanceReport = field(default_factory=balancing.BalanceReport)
    curriculum: CurriculumReport = field(default_factory=CurriculumReport)
    samples: Counter[str] = field(default_factory=Counter)  # the round's samples: kept, and dropped by reason
    corrections: Counter[str] = field(default_factory=Counter)  # human corrections used, or why not

    def render(self) -> str:
        kept = self.samples.get("kept", 0)
        drops = ", ".join(f"{k}={v}" for k, v in sorted(self.samples.items()) if k != "kept") or "none"
        return "\n".join(
            [
                self.dedup.render(),
                f"features ({self.featurizer}, threshold {self.threshold}): "
                f"{self.cache.requested} screenshots, "
                f"{self.cache.unique} distinct, "
                f"{self.cache.cached} from cache, {self.cache.computed} computed "
                f"({self.cache.avoided:.0%} of inference avoided)",
                self.guidance.render(),
                self.thoughts.render(),
                self.recovery.render(),
                f"human corrections: {counts(self.corrections)}",
                self.balance.render(),
                self.curriculum.render(),
                f"samples retained: {kept}; dropped by reason: {drops}",
            ]
        )


def curate_round(
    sessions: sessionmaker[Session],
    round_id: int,
    store: ObjectStore,
    settings: CurationSettings,
    demonstrate: Demonstrator | None,
    outcomes: Mapping[int, Outcome],
    gateway: LLMGateway | None = None,
    featurizer: Featurizer | None = None,
    prober: Prober | None = None,
) -> CurationReport:
    """Curate one judged round (see the module docstring); safe to rerun. `outcomes` are the
    episodes' decided outcomes by id (`critics.outcomes.round_outcomes`). `prober` plays the
    error-recovery probes on a device (`rollout.recovery`); without one, recovery is skipped."""
    report = CurationReport()
    rollouts = load_rollouts(sessions, round_id, outcomes)
    groups = by_query(rollouts)
    frames = frame_reader(store)
    dropped = _dedup_round(
        sessions,
        round_id,
        rollouts,
        featurizer or make_featurizer(settings, sessions, store),
        frames,
        settings,
        report,
    )
    accepted = _accepted_steps(sessions, round_id, rollouts, dropped)
    work = _model_work(sessions, round_id, groups, accepted, demonstrate, gateway, frames, settings)
    report.guidance, thoughts, report.thoughts = asyncio.run(
        work if gateway is None else closing(gateway, work)
    )
    recovered, report.recovery = recover(groups, prober, settings.recovery_sites)
    with transaction(sessions) as s:
        record_exclusions(s, round_id, "recovery", "site", report.recovery.exclusions)
    ids = {r.uid: r.episode_id for r in rollouts}
    batches: dict[int | None, list[SampleDraft]] = {}
    for d in thoughts + recovered:
        batches.setdefault(ids.get(d.provenance["episode"]), []).append(d)
    store_drafts(sessions, round_id, list(batches.items()), "curate")
    corrected, report.corrections = correction_samples(sessions, round_id)
    store_drafts(sessions, round_id, corrected, "curate")
    report.corrections["superseded_samples"] += supersede(sessions, round_id, corrected)
    report.balance = _balance(sessions, round_id, {q: pass_rate(g) for q, g in groups.items()}, settings)
    report.curriculum = label_and_hold(sessions, round_id, groups, settings)
    with sessions() as s:
        for status, reason, n in s.execute(
            select(Sample.status, Sample.reason, func.count())
            .where(Sample.round_id == round_id)
            .group_by(Sample.status, Sample.reason)
        ):
            report.samples["kept" if status == "kept" else (reason or "dropped")] += n
    return report


def _dedup_round(
    sessions: sessionmaker[Session],
    round_id: int,
    rollouts: list[Rollout],
    featurizer: Featurizer,
    frames: Callable[[str], bytes],
    settings: CurationSettings,
    report: CurationReport,
) -> set[str]:
    """Near-duplicate trajectories of each query group, decided and stored: the dropped uids."""
    features = FeatureStore(sessions, featurizer, frames)
    report.featurizer, report.threshold = featurizer.key, dedup_threshold(settings, featurizer)
    thumbs = FeatureStore(sessions, GreyThumbs(), frames) if settings.dedup_skip_overlays else None
    decisions, report.dedup = dedup(
        _trajectories(sessions, round_id, rollouts, features, thumbs, settings.dedup_collapse),
        report.threshold,
        settings.ivf_min_group,
        settings.dedup_within_outcome,
    )
    report.cache = features.stats
    _store_dedup(sessions, round_id, rollouts, decisions)
    return {d.uid for d in decisions if not d.kept}


async def _model_work(
    sessions: sessionmaker[Session],
    round_id: int,
    groups: dict[str, list[Rollout]],
    accepted: list[StepAt],
    demonstrate: Demonstrator | None,
    gateway: LLMGateway | None,
    frames: Callable[[str], bytes],
    settings: CurationSettings,
) -> tuple[GuidanceReport, list[SampleDraft], ThoughtReport]:
    """Guidance and thoughts: every model call of the round on one event loop (the gateway's
    client is bound to it)."""
    guided = await write_guidance(
        sessions,
        round_id,
        groups,
        demonstrate,
        settings.guidance_pass_rate,
        settings.guidance_min_rollouts,
        gateway,
        frames if gateway is not None else None,
    )
    drafts, thought_report = await synthesise(
        accepted,
        settings.hint_styles,
        settings.point_tolerance,
        gateway,
        frames,
        only_bottlenecks=settings.thoughts_for == "bottleneck",
    )
    return guided, drafts, thought_report


def _trajectories(
    sessions: sessionmaker[Session],
    round_id: int,
    rollouts: list[Rollout],
    features: FeatureStore,
    thumbs: FeatureStore | None,
    collapse: float,
) -> list[Trajectory]:
    """The round's trajectories plus, per query, those earlier rounds retained (the priors);
    with `thumbs`, embedded without the frames a dismissed dialog covered."""
    frames_of: dict[str, tuple[tuple[str, ...], bool, bool, str]] = {}
    for r in rollouts:
        if r.steps:
            shots = (*(v.before for v in r.steps), r.steps[-1].after)
            frames_of[r.uid] = (shots, bool(r.success), False, r.query.uid)
    with sessions() as s:
        excluded = select(Exclusion.item_key).where(
            Exclusion.stage == DEDUP_STAGE, Exclusion.item_type == "episode"
        )
        earlier = s.execute(
            select(Episode.id, Episode.uid, Episode.outcome, QueryRow.uid)
            .join(QueryRow, QueryRow.id == Episode.query_id)
            .where(
                QueryRow.uid.in_({r.query.uid for r in rollouts}),
                Episode.round_id < round_id,
                Episode.uid.not_in(excluded),
            )
        ).all()
        shots_of: dict[int, list[tuple[str, str | None]]] = {}
        for i in range(0, len(earlier), 500):  # one query per 500 episodes, not one per episode
            ids = [e[0] for e in earlier[i : i + 500]]
            for episode_id, before, after in s.execute(
                select(Step.episode_id, Step.screenshot, Step.screenshot_after)
                .where(Step.episode_id.in_(ids))
                .order_by(Step.episode_id, Step.index)
            ):
                shots_of.setdefault(episode_id, []).append((before, after))
        for episode_id, uid, outcome, query_uid in earlier:
            steps = shots_of.get(episode_id)
            if steps:
                shots = (*(b for b, _ in steps), steps[-1][1] or steps[-1][0])
                frames_of[uid] = (shots, outcome == "success", True, query_uid)
    hashes = [h for shots, *_ in frames_of.values() for h in shots]
    vectors = features.vectors(hashes)
    greys = thumbs.vectors(hashes) if thumbs is not None else None
    return [
        Trajectory(uid, group, shots, embed_frames(shots, vectors, greys, collapse), success, prior)
        for uid, (shots, success, prior, group) in frames_of.items()
    ]


def _store_dedup(
    sessions: sessionmaker[Session], round_id: int, rollouts: list[Rollout], decisions: list[Decision]
) -> None:
    ids = {r.uid: r.episode_id for r in rollouts}
    drops = [d for d in decisions if not d.kept]
    with transaction(sessions) as s:
        record_exclusions(
            s,
            round_id,
            DEDUP_STAGE,
            "episode",
            (
                (
                    d.uid,
                    d.reason or "",
                    {"duplicate_of": d.duplicate_of, "similarity": d.similarity, "query": d.group},
                )
                for d in drops
            ),
        )
        for d in drops:  # the samples extracted from a dropped trajectory go with it
            s.execute(
                update(Sample)
                .where(
                    Sample.episode_id == ids[d.uid], Sample.status == "kept", Sample.category.in_(CATEGORIES)
                )
                .values(status="dropped", reason=d.reason)
            )


def _accepted_steps(
    sessions: sessionmaker[Session], round_id: int, rollouts: list[Rollout], dropped: set[str]
) -> list[StepAt]:
    """Steps whose action-prediction sample survived the critic filter, in retained trajectories."""
    by_id = {r.episode_id: r for r in rollouts if r.uid not in dropped}
    with sessions() as s:
        kept = s.execute(
            select(Sample.episode_id, Sample.step_index).where(
                Sample.round_id == round_id, Sample.category == "action_prediction", Sample.status == "kept"
            )
        ).all()
    out = []
    for episode_id, index in sorted(kept, key=lambda k: (k[0] or 0, k[1] or 0)):
        r = by_id.get(episode_id or -1)
        if r is None or index is None or r.steps[index].act is None:
            continue
        out.append((r, index))
    return out


def _balance(
    sessions: sessionmaker[Session], round_id: int, rates: dict[str, float], settings: CurationSettings
) -> balancing.BalanceReport:
    """Re-decide balancing over the round's samples that nothing else dropped (idempotent)."""
    with sessions() as s:
        rows = s.execute(
            select(Sample.uid, Sample.category, Sample.provenance, Sample.payload).where(
                Sample.round_id == round_id,
                (Sample.status == "kept") | Sample.reason.in_((*balancing.REASONS, ZERO_PASS)),
            )
        ).all()
    items = [
        balancing.Item(
            uid, category, prov.get("query"), str(payload.get("response", "")), payload.get("polarity")
        )
        for uid, category, prov, payload in rows
    ]
    decided, report = balancing.balance(items, rates, settings)
    with transaction(sessions) as s:
        by_decision: dict[tuple[str | None, float], list[str]] = {}
        for uid, decision in decided.items():
            by_decision.setdefault(decision, []).append(uid)
        for (reason, weight), uids in by_decision.items():
            for start in range(0, len(uids), 500):
                s.execute(
                    update(Sample)
                    .where(Sample.uid.in_(uids[start : start + 500]))
                    .values(status="dropped" if reason else "kept", reason=reason, weight=weight)
                )
        record_exclusions(
            s,
            round_id,
            "balance",
            "sample",
            ((uid, reason, {}) for uid, (reason, _) in decided.items() if reason),
        )
    return report
