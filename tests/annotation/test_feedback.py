"""What pulled human verdicts and corrections do downstream: CSRS samples and curation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from critics.csrs import SUPERSEDED, extract_round
from critics.outcomes import round_outcomes
from curation.corrections import CATEGORY
from curation.corrections import SUPERSEDED as CORRECTED
from curation.pipeline import CurationReport, curate_round
from rollout.sim.env import demonstrator
from storage.db import transaction
from storage.models import (
    Anchor,
    AnnotationProject,
    AnnotationTask,
    Correction,
    Episode,
    Exclusion,
    HumanAnnotation,
    Sample,
    Step,
)
from storage.objectstore import open_object_store
from storage.samples import CATEGORIES
from tests.annotation.conftest import smoke_round
from trajforge.appspec import builtin_app_names, load_app
from trajforge.settings import Settings


def _human_verdict(
    sessions: sessionmaker[Session], episode_id: int, round_id: int, label: str, step: int
) -> dict[str, object]:
    """What `annotate pull` stores for one annotator who reversed the verifier and corrected a step."""
    corrected: dict[str, object] = {"kind": "click", "point": [500, 300]}
    with transaction(sessions) as s:
        project = AnnotationProject(key="app:test", ls_project_id=1, title="t", config_sha256="0")
        s.add(project)
        s.flush()
        task = AnnotationTask(episode_id=episode_id, round_id=round_id, project_id=project.id, ls_task_id=1)
        s.add(task)
        s.flush()
        note = HumanAnnotation(
            ls_annotation_id=1,
            task_id=task.id,
            episode_id=episode_id,
            annotator="ann@x",
            verdict=label,
            ls_updated_at=datetime.now(UTC),
        )
        s.add(note)
        s.flush()
        s.add(Anchor(episode_id=episode_id, source="human", annotator="ann@x", label=label))
        s.add_all(
            [
                Correction(
                    annotation_id=note.id,
                    episode_id=episode_id,
                    step_index=step,
                    annotator="ann@x",
                    action_text="{...}",
                    action=corrected,
                    action_format="clicked",
                    thought="The button is at the top.",
                    instruction="Tap the button at the top",
                    source="clicked",
                ),
                Correction(
                    annotation_id=note.id,
                    episode_id=episode_id,
                    step_index=step + 1,
                    annotator="ann@x",
                    action_text="poke it",
                    parse_error="unparseable_correction",
                ),
            ]
        )
    return corrected


def _curate(sessions: sessionmaker[Session], round_id: int, settings: Settings) -> CurationReport:
    """Curate the round as the loop does: the built-in apps, the outcomes the critics decide."""
    apps, store = [load_app(n) for n in builtin_app_names()], open_object_store(settings)
    outcomes = round_outcomes(sessions, round_id, settings.critics)
    return curate_round(sessions, round_id, store, settings.curate, demonstrator(apps, store), outcomes)


def _samples(sessions: sessionmaker[Session], episode_id: int) -> list[Sample]:
    with sessions() as s:
        return list(s.scalars(select(Sample).where(Sample.episode_id == episode_id)))


def test_a_reversed_outcome_supersedes_samples_and_corrections_become_samples(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings, sessions, round_id = smoke_round(rollouts=2)
    with sessions() as s:
        # a successful episode with action samples on step 0
        episode_id, verifier = s.execute(
            select(Anchor.episode_id, Anchor.label)
            .join(Episode, Episode.id == Anchor.episode_id)
            .where(Anchor.source == "verifier", Anchor.label == "success", Episode.num_steps >= 3)
            .order_by(Anchor.episode_id)
        ).first()  # type: ignore[misc]
    before = {x.uid: x for x in _samples(sessions, episode_id)}
    assert any(x.category == "action_prediction" and x.status == "kept" for x in before.values())
    corrected = _human_verdict(sessions, episode_id, round_id, "failure", step=0)

    extracted = extract_round(sessions, round_id)
    assert extracted.dropped[SUPERSEDED] > 0
    after = _samples(sessions, episode_id)
    stale = [x for x in after if x.uid in before and x.status == "dropped" and x.reason == SUPERSEDED]
    assert stale and all(x.provenance["anchor"]["label"] == "success" for x in stale)
    fresh = [x for x in after if x.uid not in before]
    assert fresh and all(
        x.provenance["anchor"] == {"source": "human", "label": "failure", "overrides": "success"}
        for x in fresh
    )
    assert not any(
        x.category == "action_prediction" and x.status == "kept" for x in after
    )  # failure: no targets
    verification = [x for x in fresh if x.category == "state_verification"]
    assert verification and all(x.payload["response"] == "no" for x in verification)

    report = _curate(sessions, round_id, settings)
    assert report.corrections["action"] == 1 and report.corrections["unparseable_correction"] == 1
    (sample,) = [x for x in _samples(sessions, episode_id) if x.category == CATEGORY]
    assert sample.payload["action"] == corrected and sample.payload["thought"] == "The button is at the top."
    assert sample.payload["instruction"] == "Tap the button at the top"  # Mobile-R1's middle step
    assert sample.provenance["given"] == "clicked"
    assert sample.provenance["corrected"] == ["action", "thought", "instruction"]
    assert sample.provenance["annotator"] == "ann@x" and sample.step_index == 0
    with sessions() as s:
        shot = s.scalar(select(Step.screenshot).where(Step.episode_id == episode_id, Step.index == 0))
    assert sample.payload["images"] == [shot]

    # reruns change nothing
    with sessions() as s:
        rows = s.scalar(select(func.count()).select_from(Sample))
    extract_round(sessions, round_id)
    _curate(sessions, round_id, settings)
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Sample)) == rows

    # the human anchor withdrawn: the verifier decides again and its samples come back
    with transaction(sessions) as s:
        s.execute(delete(Anchor).where(Anchor.episode_id == episode_id, Anchor.source == "human"))
    extract_round(sessions, round_id)
    restored = {x.uid: x for x in _samples(sessions, episode_id)}
    # a sample the curation held while the query was unsolved (zero-pass hold-out) stays held
    # until a curation finds it solved again
    assert all(
        restored[uid].status == before[uid].status or restored[uid].reason == "zero_pass" for uid in before
    )
    reversed_ = [x for uid, x in restored.items() if uid not in before and x.category != CATEGORY]
    assert reversed_ and not any(x.status == "kept" for x in reversed_)  # the overridden outcome is gone
    with sessions() as s:
        back = select(func.count()).select_from(Exclusion)
        assert s.scalar(back.where(Exclusion.item_key.in_(list(before)), Exclusion.reason == SUPERSEDED)) == 0
    assert verifier == "success"


def test_a_human_who_agrees_becomes_the_samples_recorded_source(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    _, sessions, round_id = smoke_round(rollouts=2)
    with sessions() as s:
        episode_id = s.scalar(
            select(Anchor.episode_id).where(Anchor.source == "verifier", Anchor.label == "success")
        )
    assert episode_id is not None

    def csrs_samples() -> dict[str, tuple[str, dict[str, str]]]:
        return {
            x.uid: (x.status, x.provenance["anchor"])
            for x in _samples(sessions, episode_id)
            if x.category in CATEGORIES
        }

    before = csrs_samples()
    assert before and all(a == {"source": "verifier", "label": "success"} for _, a in before.values())
    _human_verdict(sessions, episode_id, round_id, "success", step=0)

    extracted = extract_round(sessions, round_id)
    assert SUPERSEDED not in extracted.dropped
    after = csrs_samples()
    assert after.keys() == before.keys()  # the same samples, kept or dropped as before
    assert all(after[uid][0] == status for uid, (status, _) in before.items())
    assert all(a == {"source": "human", "label": "success"} for _, a in after.values())


def test_a_corrected_action_supersedes_the_models_action_samples(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    settings, sessions, round_id = smoke_round(rollouts=2)
    with sessions() as s:
        found = s.execute(
            select(Sample.episode_id, Sample.step_index)
            .where(Sample.category == "action_prediction", Sample.status == "kept")
            .order_by(Sample.id)
        ).first()
    assert found is not None and found[0] is not None and found[1] is not None
    episode_id, index = int(found[0]), int(found[1])
    _human_verdict(sessions, episode_id, round_id, "success", step=index)
    report = _curate(sessions, round_id, settings)
    assert report.corrections["superseded_samples"] >= 1
    step = [x for x in _samples(sessions, episode_id) if x.step_index == index]
    assert {x.reason for x in step if x.category in ("action_prediction", "intent_execution")} == {CORRECTED}
    assert [x.status for x in step if x.category == CATEGORY] == ["kept"]
