"""Curation's three stages of a round: `encoder` (the screen encoder dedup uses, trained when none
is stored), `featurise` (screenshot features into the cache, fanned out by episode) and `curate`
(dedup, guidance, thoughts, recovery and balancing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy import select

from curation.encoder import round_encoder
from curation.pipeline import CurationReport, curate_round
from storage.context import RoundContext
from storage.features import FeatureStore, make_featurizer
from storage.models import Episode, Step
from trajforge.endpoints import charge_round
from trajforge.recovery import Prober
from trajforge.stage import MODEL_CALLS, PART, Facts, Given, Stage, split, sum_counts


def encoder(ctx: RoundContext, number: int, _given: Given) -> Facts:
    """The screen encoder of round `number`'s dedup (`curation.encoder.round_encoder`)."""
    used = round_encoder(ctx.sessions, ctx.store, ctx.frames, ctx.settings.curate, number)
    return Facts(used, f"screen encoder: {used['featurizer']} ({used['source']})")


def episode_parts(ctx: RoundContext, number: int, _given: Given) -> list[list[str]]:
    """The round's episodes by uid, in `evolve.shards` parts."""
    round_id = ctx.round(number).id
    with ctx.sessions() as s:
        uids = list(s.scalars(select(Episode.uid).where(Episode.round_id == round_id).order_by(Episode.uid)))
    return split(uids, ctx.settings.evolve.shards)


def featurise(ctx: RoundContext, _number: int, given: Given) -> Facts:
    """Screenshot features of these episodes into the feature cache (curation then finds them)."""
    with ctx.sessions() as s:
        hashes = s.scalars(
            select(Step.screenshot)
            .join(Episode, Episode.id == Step.episode_id)
            .where(Episode.uid.in_(given[PART]))
        ).all()
    featurizer = make_featurizer(ctx.settings.curate, ctx.sessions, ctx.store)
    features = FeatureStore(ctx.sessions, featurizer, ctx.frames)
    features.vectors(hashes)
    stats = features.stats.as_dict()
    return Facts(stats, f"screenshot features: {stats}")


class CuratedJson(TypedDict):
    """The curate stage's report, as `finish` reads it."""

    samples: dict[str, int]
    recovery: dict[str, Any]
    dedup: dict[str, Any]  # kept, total, reasons
    curriculum: dict[str, Any]  # the curriculum's figures and the round's `tier_mix`


@dataclass
class Curated:
    report: CurationReport
    tier_mix: Any  # the round's curriculum mix (`evolve.tier_mix`)

    def render(self) -> str:
        return self.report.render()

    def as_json(self) -> CuratedJson:
        report, dedup = self.report, self.report.dedup
        return CuratedJson(
            samples=dict(report.samples),
            recovery=report.recovery.as_dict(),
            dedup={"kept": dedup.kept, "total": dedup.total, "reasons": dict(dedup.reasons)},
            curriculum={**report.curriculum.as_dict(), "tier_mix": self.tier_mix},
        )


def curate(ctx: RoundContext, number: int, _given: Given) -> Curated:
    """Dedup, guidance, thoughts, recovery and balancing; recovery probes on one of the run's devices."""
    return curate_with(ctx, number, ctx.prober())


def curate_with(ctx: RoundContext, number: int, prober: Prober | None) -> Curated:
    """`curate` with recovery probes played by `prober` (none: recovery is skipped)."""
    settings = ctx.settings
    round_id = ctx.round(number).id
    with charge_round(round_id):
        report = curate_round(
            ctx.sessions,
            round_id,
            ctx.store,
            settings.curate,
            ctx.demonstrator(),
            ctx.outcomes(number),
            ctx.gateway("writer"),
            prober=prober,
        )
    return Curated(report, settings.evolve.mix_of(number))


ENCODER: Stage[RoundContext] = Stage(
    "encoder", "train-encoder", encoder, reads=("step",), writes=("encoder",), after=("rollout",)
)
FEATURISE: Stage[RoundContext] = Stage(
    "featurise",
    "featurise-shard",
    featurise,
    reads=("step", "encoder"),
    writes=("screen_feature",),
    after=("rollout",),
    fan_out=episode_parts,
    merge=sum_counts,
)
CURATE: Stage[RoundContext] = Stage(
    "curate",
    "curate",
    curate,
    reads=("episode", "step", "judgment", "anchor"),
    writes=("sample", "guidance", "screen_feature", "query_pass_rate", "exclusion"),
    after=("judge",),
    tags=(MODEL_CALLS,),
)
