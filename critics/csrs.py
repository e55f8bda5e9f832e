"""CSRS data extraction (Step-GUI §2.1.4): seven categories of training samples per anchored trajectory.

(1) progress tracking, (2) state summary, (3) effect prediction, (4) self-reflection,
(5) state verification, (6) intent execution, (7) action prediction. Selective learning:
a successful trajectory yields all seven; a failed one only 1-6 ("learn knowledge from
failures, not erroneous actions"). Offline, samples are deterministic templates over the
step records; every sample keeps its provenance. Action-prediction samples also pass the
critic filter (score >= tau_c, GUI-Owl §2.2.3) and a thought-action consistency check;
every drop keeps a reason.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from critics.audit import draw
from critics.csrs_writer import Judged, write_with_model
from critics.llm import JUDGE_VERSION, TEMPLATES, LLMEpisodeJudge, knowledge
from critics.outcomes import decide_outcomes, label_order
from critics.trust import TRUST, trust_table
from storage.db import record_exclusions, transaction
from storage.episodes import round_episodes, round_step_judgments, stored_step_verdicts
from storage.models import Episode, Exclusion, HumanAnnotation, Round, Sample
from storage.samples import CATEGORIES, OUTCOME_STAGE, store_drafts
from trajforge.actions import Action, Screen
from trajforge.actions.compare import THOUGHT_ACTION_MISMATCH, target_bbox
from trajforge.domain import (
    EMPTY_ANSWER,
    EPISODE_ENDS,
    Query,
    StepVerdict,
    StepView,
    blank_answer,
    describe,
    screen_text,
)
from trajforge.gateway import LLMGateway, closing
from trajforge.logs import counts
from trajforge.sample import SampleDraft, said
from trajforge.settings import CriticSettings
from trajforge.verdicts import AUDIT, LABEL_ORDER, Outcome

SCORES = {"GOOD": 1.0, "NEUTRAL": 0.5, "HARMFUL": 0.0}
TAU_C = 0.5  # keep GOOD and NEUTRAL steps as action targets, drop HARMFUL ones
TEMPLATE_VERSION = "csrs-templates-1"
TRAJECTORY_FAILED = "trajectory_failed"  # action samples of a trajectory the anchor failed
SUPERSEDED = "superseded_by_human_anchor"  # written under an outcome a human has since reversed
_PROMPTS = TEMPLATES.get_template("csrs_prompts.j2").module


def prompt(category: str, **values: str) -> str:
    """A category's knowledge prompt (`templates/csrs_prompts.j2`) with its values filled in."""
    return str(getattr(_PROMPTS, category)(**values))


@dataclass
class ExtractionReport:
    kept: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    undecided: Counter[str] = field(default_factory=Counter)  # episodes left for a human, by reason
    # samples the model was asked for but did not write (the template answer stands), by reason
    template_kept: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        kept = ", ".join(f"{k}={v}" for k, v in sorted(self.kept.items()))
        dropped = counts(self.dropped)
        line = f"samples kept: {kept}\nsamples dropped: {dropped}"
        if self.template_kept:
            line += (
                f"\nmodel answers missing, template answers kept: {counts(self.template_kept)} "
                "(failed requests are retried by the next run)"
            )
        if self.undecided:
            line += f"\nepisodes without an outcome, queued for human review: {counts(self.undecided)}"
        return line


def extract(
    query: Query,
    episode_uid: str,
    success: bool,
    anchor: dict[str, Any],
    steps: list[StepView],
    verdicts: list[StepVerdict],
    critic: str = "route_check:1",
    tau_c: float = TAU_C,
) -> list[SampleDraft]:
    """The seven-category samples of one anchored trajectory (offline templates)."""
    out: list[SampleDraft] = []
    done: list[str] = []
    for i, (view, verdict) in enumerate(zip(steps, verdicts, strict=True)):
        facts = {"outcome": success, "label": verdict.label, "history": list(done), "after": view.after}
        prov = {
            "episode": episode_uid,
            "steps": [i],
            "anchor": anchor,
            "critics": [critic],
            "template": TEMPLATE_VERSION,
            "query": query.uid,
        }
        drafts = _seeing(query, i, view, done, success and i == len(steps) - 1, prov)
        if (action := view.act) is not None:
            words = describe(action, view)
            after = screen_text(steps[i + 1].elements) if i + 1 < len(steps) else EPISODE_ENDS
            drafts += _acting(query, i, view, action, words, after, verdict, done, prov)
            drafts[-1].reason = _action_drop(success, verdict, action, words, tau_c)
            done.append(words)
        _anchor(drafts, facts)
        out += drafts
    for draft in out:  # a screen with no text to summarise or predict: nothing to learn from
        if draft.reason is None and blank_answer(draft.payload["response"]):
            draft.reason = EMPTY_ANSWER
    return out


def _seeing(
    query: Query, i: int, view: StepView, done: list[str], ended_well: bool, prov: dict[str, Any]
) -> list[SampleDraft]:
    """What the screen shows, how far the task is, whether it is done: every step has these."""
    images = [view.before]
    progress = ("Done: " + "; ".join(done) if done else "Nothing yet.") + f" Step {i + 1} comes next."
    verification = {
        "images": images,
        "prompt": prompt("state_verification", task=query.instruction),
        "response": "yes" if ended_well else "no",
        "polarity": ended_well,  # what balancing reads, whoever words it
    }
    return [
        SampleDraft(
            "state_summary",
            i,
            {"images": images, "prompt": prompt("state_summary"), "response": screen_text(view.elements)},
            prov,
        ),
        SampleDraft(
            "progress_tracking",
            i,
            {
                "images": images,
                "prompt": prompt("progress_tracking", task=query.instruction),
                "response": progress,
            },
            prov,
        ),
        SampleDraft("state_verification", i, verification, prov),
    ]


def _acting(
    query: Query,
    i: int,
    view: StepView,
    action: Action,
    words: str,
    next_screen: str,
    verdict: StepVerdict,
    done: list[str],
    prov: dict[str, Any],
) -> list[SampleDraft]:
    """What the action does, whether it was right, and the action itself (by intent and by task)."""
    images = [view.before]
    screen = screen_text(view.elements)
    effect = {
        "images": images,
        "prompt": prompt("effect_prediction", screen=screen, action=words),
        "response": next_screen if view.after != view.before else "The screen does not change.",
    }
    reflection = {
        "images": [view.before, view.after],
        "prompt": prompt("self_reflection", task=query.instruction, action=words),
        "response": f"{verdict.label}: {verdict.summary}",
        **({"polarity": verdict.label == "GOOD"} if verdict.label != "NEUTRAL" else {}),
    }
    grounding = _grounding(action, words, view)
    answer = json.dumps(grounding["action"], ensure_ascii=False)
    history = "; ".join(done) or "none"
    return [
        SampleDraft("effect_prediction", i, effect, prov),
        SampleDraft("self_reflection", i, reflection, prov),
        SampleDraft(
            "intent_execution",
            i,
            {
                "images": images,
                "prompt": prompt("intent_execution", action=words),
                "response": answer,
                **grounding,
            },
            prov,
        ),
        SampleDraft(
            "action_prediction",
            i,
            {
                "images": images,
                "prompt": prompt("action_prediction", task=query.instruction, history=history),
                "response": answer,
                **grounding,
            },
            prov,
        ),
    ]


def _grounding(action: Action, words: str, view: StepView) -> dict[str, Any]:
    """What exports and RL rewards need of an action sample: the action, its intent in words, the
    screen, the target's bbox, and the policy's own reasoning with it (`said`), which exports
    answer with."""
    return {
        "action": action.core().stored(),
        "intent": words,
        "said": said(action),
        "screen": [view.width, view.height],
        "bbox": target_bbox(action, view.elements, Screen(view.width, view.height)),
    }


def _judge_answers(
    uid: str, steps: list[Any], judged: dict[int, dict[str, Any]]
) -> dict[tuple[Any, int | None], Judged]:
    """The knowledge answers the model critics' episode judge wrote for an episode's steps."""
    out: dict[tuple[Any, int | None], Judged] = {}
    for i, st in enumerate(steps):
        row = judged.get(st.id, {}).get(LLMEpisodeJudge.name)
        if row is not None and row.critic_version.startswith(JUDGE_VERSION):
            answers = knowledge(row.raw_output)
            if answers:
                model = row.critic_version.removeprefix(JUDGE_VERSION)
                out[(uid, i)] = Judged(answers, model, row.critic_version)
    return out


def _action_drop(success: bool, verdict: StepVerdict, action: Action, words: str, tau_c: float) -> str | None:
    """Why an action-prediction sample is dropped: a failed trajectory's actions stay as data,
    dropped with their reason (unfiltered runs use them)."""
    if not success:
        return TRAJECTORY_FAILED
    if SCORES[verdict.label] < tau_c:
        return "critic_below_threshold"
    if action.thought and not _consistent(action.thought, words):
        return THOUGHT_ACTION_MISMATCH
    return None


def _anchor(drafts: list[SampleDraft], facts: dict[str, Any]) -> None:
    for draft in drafts:
        draft.context = facts


def _consistent(thought: str, words: str) -> bool:
    """The thought must name the element the action taps (when the action names one)."""
    quoted = words.split("'")
    return len(quoted) < 3 or quoted[1].casefold() in thought.casefold()


def extract_round(
    sessions: sessionmaker[Session],
    round_id: int,
    gateway: LLMGateway | None = None,
    frames: Callable[[str], bytes] | None = None,
    settings: CriticSettings | None = None,
    judge_writes: bool = False,
) -> ExtractionReport:
    """Samples for every episode of a judged round whose outcome is decided (`critics.outcomes`);
    idempotent; drops go to `exclusion` too, and so do episodes left for a human, with why.

    Step labels are the stored step judgments (a model critic's where present). With a gateway
    (and `frames` to load screenshots), categories 1-5 are written by the model; with
    `judge_writes` (the writer and the model critics share an endpoint and model), a step the
    model critics judged takes the answers their request already wrote.
    """
    settings = settings or CriticSettings()
    report = ExtractionReport()
    batches: list[tuple[int, list[SampleDraft]]] = []
    outcomes: dict[int, dict[str, Any]] = {}  # episode id -> its provenance.anchor now
    undecided: list[tuple[str, str, dict[str, Any]]] = []
    answered: dict[tuple[Any, int | None], Judged] = {}
    with sessions() as s:
        decided = decide_outcomes(s, round_id, settings)
        judged = round_step_judgments(s, round_id)
        for episode, query, steps in round_episodes(s, round_id):
            outcome = decided[episode.id]
            if outcome.success is None:
                detail = {"accuracy": outcome.accuracy, "anchored": outcome.anchored}
                undecided.append((episode.uid, outcome.source, detail))
                continue
            verdicts = stored_step_verdicts(judged, round_id, steps)
            answered.update(_judge_answers(episode.uid, steps, judged) if judge_writes else {})
            views = [st.view() for st in steps]
            outcomes[episode.id] = outcome.provenance()
            drafts = extract(
                query,
                episode.uid,
                outcome.success,
                outcomes[episode.id],
                views,
                verdicts,
                tau_c=settings.tau_c,
            )
            batches.append((episode.id, drafts))
    if gateway is not None and frames is not None:  # one event loop for every model call
        every = [d for _, drafts in batches for d in drafts]
        asyncio.run(
            closing(gateway, write_with_model(every, gateway, frames, settings.csrs_model_share, answered))
        )
        report.template_kept = Counter(filter(None, (d.provenance.get("writer_error") for d in every)))
    superseded = revise_outcomes(sessions, round_id, outcomes)
    for bucket, tally in store_drafts(sessions, round_id, batches, "csrs").items():
        getattr(report, bucket).update(tally)
    _record_decisions(sessions, round_id, undecided, settings, decided)
    report.undecided = Counter(reason for _, reason, _ in undecided)
    if superseded:
        report.dropped[SUPERSEDED] = superseded
    return report


def _record_decisions(
    sessions: sessionmaker[Session],
    round_id: int,
    undecided: list[tuple[str, str, dict[str, Any]]],
    settings: CriticSettings,
    decided: dict[int, Outcome],
) -> None:
    """The round's episodes without an outcome, as exclusions of the outcome stage (and no others),
    and the critics' trust table in the round's stats (`critics.trust`)."""
    with transaction(sessions) as s:
        row = s.get(Round, round_id)
        if row is not None:  # the audit sample is drawn once: what was published then stays audited
            in_round = select(Episode.id, Episode.uid).where(Episode.round_id == round_id)
            uids = {episode_id: uid for episode_id, uid in s.execute(in_round)}
            sample = (row.stats or {}).get(AUDIT) or draw(decided, uids, settings.audit_size, round_id)
            row.keep({AUDIT: sample, LABEL_ORDER: label_order(s, round_id, settings)})
            row.keep({TRUST: trust_table(s, round_id, settings, decided)})
        s.execute(
            delete(Exclusion).where(
                Exclusion.round_id == round_id,
                Exclusion.stage == OUTCOME_STAGE,
                Exclusion.item_key.not_in([uid for uid, _, _ in undecided]),
            )
        )
        record_exclusions(s, round_id, OUTCOME_STAGE, "episode", undecided)


def revise_outcomes(
    sessions: sessionmaker[Session], round_id: int, outcomes: dict[int, dict[str, Any]]
) -> int:
    """Samples written under an outcome the deciding anchor no longer gives are dropped as
    `superseded_by_human_anchor`; ones dropped so, whose outcome holds again, are restored.
    Samples whose outcome holds record the deciding anchor as it is now (`provenance.anchor`:
    a human who agrees with the critic or the verifier becomes the source).

    Returns how many were dropped now.
    """
    dropped = 0
    with transaction(sessions) as s:
        # only episodes a human ever annotated can hold samples of an outcome that changed
        annotated = select(HumanAnnotation.episode_id).distinct()
        rows = s.scalars(
            select(Sample).where(
                Sample.episode_id.in_(annotated),
                Sample.category.in_(CATEGORIES),
                Sample.round_id == round_id,
            )
        )
        for sample in rows:
            anchor = outcomes.get(sample.episode_id or 0)
            if anchor is None:
                continue
            written = (sample.provenance.get("anchor") or {}).get("label")
            holds = written == anchor["label"]
            if holds and sample.provenance.get("anchor") != anchor:
                sample.provenance = {**sample.provenance, "anchor": anchor}
            if sample.status == "kept" and not holds:
                sample.status, sample.reason = "dropped", SUPERSEDED
                record_exclusions(s, round_id, "csrs", "sample", [(sample.uid, SUPERSEDED, {"was": written})])
                dropped += 1
            elif sample.reason == SUPERSEDED and holds:
                sample.status, sample.reason = "kept", None
                s.execute(
                    delete(Exclusion).where(Exclusion.item_key == sample.uid, Exclusion.reason == SUPERSEDED)
                )
    return dropped
