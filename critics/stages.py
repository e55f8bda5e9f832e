"""The critics' two stages of a round: `judge` (every step and episode, by the offline critics and
the model critics where an endpoint is set) and `calibrate` (the consensus against the anchors,
then CSRS sample extraction)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, TypedDict

from critics.calibration import calibrate_round
from critics.csrs import ExtractionReport, extract_round
from critics.judge import JudgeReport, judge_round, judge_round_llm
from storage.context import RoundContext
from trajforge.endpoints import charge_round
from trajforge.gateway import closing
from trajforge.settings import LLMSettings
from trajforge.stage import MODEL_CALLS, Given, Stage
from trajforge.verdicts import CONSENSUS


@dataclass
class Judged:
    offline: JudgeReport
    model: JudgeReport | None = None  # the model critics' (None: no endpoint)
    model_name: str = ""

    def render(self) -> str:
        line = f"{self.offline.render()} (offline critics)"
        return (
            line
            if self.model is None
            else f"{line}\n{self.model.render()} (model critics, {self.model_name})"
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"episodes": self.offline.episodes, "steps": dict(self.offline.steps)}
        return out if self.model is None else {**out, "model_judged": self.model.episodes}


def judge(ctx: RoundContext, number: int, _given: Given) -> Judged:
    """Offline critics on every step and episode; the model critics too when an endpoint is set."""
    round_id, settings = ctx.round(number).id, ctx.settings.critics
    out = Judged(judge_round(ctx.sessions, round_id, ctx.apps, ctx.store, settings))
    gateway = ctx.gateway("critics")
    if gateway is not None:
        judged = judge_round_llm(ctx.sessions, round_id, gateway, ctx.frames, settings=settings)
        with charge_round(round_id):
            out.model = asyncio.run(closing(gateway, judged))
        out.model_name = ctx.settings.llm.for_group("critics").model
    return out


class CalibratedJson(TypedDict):
    """The calibrate stage's report, as `finish` reads it."""

    consensus: dict[str, Any]  # the consensus channel's figures against the anchors (n, accuracy, ...)
    kept: dict[str, int]  # the samples kept, by category
    dropped: dict[str, int]  # by reason
    undecided: dict[str, int]


@dataclass
class Calibrated:
    consensus: dict[str, Any]  # the consensus channel's accuracy against the anchors
    samples: ExtractionReport

    def render(self) -> str:
        n, accuracy = self.consensus.get("n", 0), self.consensus.get("accuracy", 0.0)
        return f"critic consensus vs anchors: {accuracy:.0%} on {n} episodes\n{self.samples.render()}"

    def as_json(self) -> CalibratedJson:
        return CalibratedJson(
            consensus=self.consensus,
            kept=self.samples.kept,
            dropped=self.samples.dropped,
            undecided=dict(self.samples.undecided),
        )


def calibrate(ctx: RoundContext, number: int, _given: Given) -> Calibrated:
    """The consensus against the anchors (verifier, or a human's verdict), then CSRS extraction."""
    round_id = ctx.round(number).id
    consensus = calibrate_round(ctx.sessions, round_id)["channels"].get(":".join(CONSENSUS), {})
    shared = judge_writes(ctx.settings.llm)
    with charge_round(round_id):
        samples = extract_round(
            ctx.sessions,
            round_id,
            ctx.gateway("writer"),
            ctx.frames,
            ctx.settings.critics,
            judge_writes=shared,
        )
    return Calibrated(consensus, samples)


def judge_writes(llm: LLMSettings) -> bool:
    """Whether the model critics' request already wrote each step's knowledge answers on the writer's
    own endpoint and model (so the CSRS writer takes them instead of asking again)."""
    critics, writer = llm.for_group("critics"), llm.for_group("writer")
    return critics.base_url is not None and (critics.base_url, critics.model) == (
        writer.base_url,
        writer.model,
    )


JUDGE: Stage[RoundContext] = Stage(
    "judge",
    "judge",
    judge,
    reads=("episode", "step", "anchor"),
    writes=("judgment",),
    after=("rollout",),
    tags=(MODEL_CALLS,),
)
CALIBRATE: Stage[RoundContext] = Stage(
    "calibrate",
    "calibrate-and-extract",
    calibrate,
    reads=("judgment", "anchor"),
    writes=("round", "sample", "exclusion"),
    after=("judge",),
    tags=(MODEL_CALLS,),
)
