"""Push → annotate → pull against a real Label Studio server (label-studio 1.23.2)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.client import Studio, project_key
from annotation.pull import pull
from annotation.push import push_round
from annotation.queue import review_queue
from annotation.stats import annotation_stats, render_stats
from critics.calibration import calibrate_round
from storage.anchors import deciding_anchor
from storage.db import transaction
from storage.models import Anchor, AnnotationProject, AnnotationTask, Correction, Episode, HumanAnnotation
from storage.objectstore import open_object_store
from tests.annotation.conftest import smoke_round
from tests.support.label_studio import LabelStudioServer
from trajforge.errors import AnnotationError, ConfigError
from trajforge.settings import AnnotationSettings, Settings

pytestmark = pytest.mark.labelstudio


def _settings(server: LabelStudioServer, **overrides: Any) -> AnnotationSettings:
    fields: dict[str, Any] = {
        "url": server.url,
        "api_key": server.token,
        "project_prefix": f"t-{uuid.uuid4().hex[:8]}",  # each test its own projects
        "audit_fraction": 0.0,
        **overrides,
    }
    return AnnotationSettings(**fields)


def _round(db_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, sessionmaker[Session], int]:
    monkeypatch.setenv("TRAJFORGE_DB_URL", db_url)
    return smoke_round(rollouts=4)


def _text(name: str, to: str, value: str) -> dict[str, Any]:
    return {"from_name": name, "to_name": to, "type": "textarea", "value": {"text": [value]}}


def _tasks(sessions: sessionmaker[Session]) -> dict[int, tuple[int, str | None]]:
    """ls task id -> (episode id, the verifier's label)."""
    with sessions() as s:
        rows = s.execute(
            select(AnnotationTask.ls_task_id, AnnotationTask.episode_id, Anchor.label)
            .outerjoin(
                Anchor, (Anchor.episode_id == AnnotationTask.episode_id) & (Anchor.source == "verifier")
            )
            .where(AnnotationTask.duplicate_of.is_(None))
            .order_by(AnnotationTask.id)
        ).all()
    return {t: (e, label) for t, e, label in rows}


def _deciding(sessions: sessionmaker[Session], episode_id: int) -> Anchor | None:
    with sessions() as s:
        return deciding_anchor(s.scalars(select(Anchor).where(Anchor.episode_id == episode_id)).all())


@pytest.mark.slow
def test_push_annotate_pull_round_trip(
    label_studio: LabelStudioServer, engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, sessions, round_id = _round(db_url, monkeypatch)
    # the critics are sure of most of this round: a verdict scored under 0.9 goes to review, the rest
    # to the blind audit, so the round has tasks of both kinds
    annotate = _settings(label_studio, audit_fraction=1.0, low_confidence=0.9)
    store = open_object_store(settings)
    studio = Studio(annotate)
    ls = studio.ls

    report = push_round(sessions, round_id, store, annotate, settings.s3)
    pushed = sum(report.pushed.values())
    assert pushed == sum(1 for _ in _tasks(sessions)) >= 4
    assert report.queued["audit"] > 0  # hard cases plus the audit sample
    with sessions() as s:
        twins = s.execute(
            select(AnnotationTask.episode_id, AnnotationTask.duplicate_of).where(
                AnnotationTask.duplicate_of.is_not(None)
            )
        ).all()
    # the simulator is deterministic: some rollouts of a query are identical, and are judged once
    assert report.merged == len(twins) > 0
    again = push_round(sessions, round_id, store, annotate, settings.s3)
    assert sum(again.pushed.values()) == 0 and again.already == pushed + len(twins)  # never twice

    tasks = _tasks(sessions)
    with sessions() as s:
        blind: dict[int, bool] = dict(
            s.execute(select(AnnotationTask.ls_task_id, AnnotationTask.blind)).tuples().all()
        )
    # each task shows every step before and after, screenshots uploaded to Label Studio; review
    # tasks carry the critics' verdicts as a pre-annotation, blind audit tasks carry none
    review_id = next(t for t in tasks if not blind[t])
    audit_id = next(t for t in tasks if blind[t])
    review = ls.tasks.get(id=str(review_id))
    with sessions() as s:
        n_steps = s.scalar(select(Episode.num_steps).where(Episode.id == tasks[review_id][0]))
    assert review.data is not None and len(review.data["steps"]) == review.data["n_steps"] == n_steps
    assert all(step["image"].startswith("/data/upload/") for step in review.data["steps"])
    assert all(step["after"].startswith("/data/upload/") for step in review.data["steps"])
    assert review.data["filmstrip"].count("<figure>") == n_steps + 1  # every step and the end
    assert len(json.dumps(review.data)) < 20_000  # the task list stays light: images are links
    prediction = ls.predictions.list(task=review_id)[0]
    assert {r["from_name"] for r in prediction.result} >= {cfg.VERDICT, cfg.step_label(0)}
    audit = ls.tasks.get(id=str(audit_id))
    assert audit.data is not None and "hidden" in audit.data["critics"] and "critics:" not in str(audit.data)
    assert not list(ls.predictions.list(task=audit_id))

    before = calibrate_round(sessions, round_id)
    assert "human" not in before["anchors"]

    # annotate as humans would: one overrides the verifier and corrects step 0, two disagree,
    # one skips
    second = ls.users.create(email=f"second-{uuid.uuid4().hex[:6]}@trajforge.test", username="second")
    third = ls.users.create(email=f"third-{uuid.uuid4().hex[:6]}@trajforge.test", username="third")
    # blind audit tasks: the verdicts reached without the critics' pre-annotation, which the critics
    # are scored on
    blind_tasks = [(t, found) for t, found in tasks.items() if blind[t]]
    (t_override, (e_override, verifier)), (t_split, (e_split, _)), (t_skip, (e_skip, _)), *_ = blind_tasks
    flipped = "failure" if verifier == "success" else "success"
    ls.annotations.create(
        id=t_override,
        result=[
            cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, flipped),
            cfg.choice(cfg.step_label(0), cfg.screen(0), "HARMFUL"),
            _text(cfg.corrected_action(0), cfg.screen(0), '{"kind":"click","point":[500,300]}'),
            _text(cfg.corrected_thought(0), cfg.screen(0), "The search box is at the top."),
            _text(cfg.corrected_action(1), cfg.screen(1), "poke the blue thing"),
            _text(cfg.corrected_instruction(1), cfg.screen(1), "Tap the search box at the top"),
            {  # clicked on step 2's screen: a quarter across, a third down
                "from_name": cfg.correct_point(2),
                "to_name": cfg.screen(2),
                "type": "keypointlabels",
                "value": {"x": 25.0, "y": 33.3, "width": 1.5, "keypointlabels": ["long_press"]},
            },
        ],
        lead_time=42.0,
    )
    ls.annotations.create(
        id=t_split, result=[cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, "success")], lead_time=5.0
    )
    ls.annotations.create(
        id=t_split, result=[cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, "failure")], completed_by=second.id
    )
    ls.annotations.create(id=t_skip, result=[], was_cancelled=True)

    pulled = pull(sessions, annotate)
    assert pulled.annotations["new"] == 4 and pulled.annotations["skipped"] == 1
    copies = {e: 1 + sum(1 for _, primary in twins if primary == e) for e in (e_override, e_split, e_skip)}
    assert pulled.anchors["set"] == copies[e_override]  # a merged identical trajectory shares the verdict
    assert pulled.unresolved == {"tie": copies[e_split], "no_verdict": copies[e_skip]}
    assert pulled.corrections == {"typed": 1, "typed_unparseable": 1, "clicked": 1}
    human = _deciding(sessions, e_override)
    assert human is not None and human.source == "human" and human.label == flipped
    assert human.annotator == label_studio.username and human.annotated_at is not None
    with sessions() as s:
        corrections = {
            c.step_index: c for c in s.scalars(select(Correction).where(Correction.episode_id == e_override))
        }
    assert corrections[0].action is not None and corrections[0].action.stored() == {
        "kind": "click",
        "point": [500, 300],
    }
    assert (
        corrections[0].thought == "The search box is at the top."
        and corrections[0].annotator == label_studio.username
    )
    assert corrections[1].action is None and corrections[1].parse_error == "unparseable_correction"
    assert corrections[1].instruction == "Tap the search box at the top"
    assert corrections[2].action is not None and corrections[2].action.stored() == {
        "kind": "long_press",
        "point": [250, 333],
    }
    assert corrections[2].source == "clicked" and corrections[0].source == "typed"
    with sessions() as s:
        for twin, primary in twins:  # an identical trajectory takes its task's human verdict
            ours = s.scalar(
                select(Anchor.label).where(Anchor.episode_id == primary, Anchor.source == "human")
            )
            theirs = s.scalar(select(Anchor.label).where(Anchor.episode_id == twin, Anchor.source == "human"))
            assert theirs == ours
    assert _deciding(sessions, e_split).source == "verifier"  # type: ignore[union-attr]  # a tie decides nothing

    after = calibrate_round(sessions, round_id)
    overridden = copies[e_override]  # the task's episode and its merged identical trajectories
    assert (
        after["anchors"]["human"] == overridden and after["anchors"]["human_overrode_verifier"] == overridden
    )
    assert after["channels"] != before["channels"]  # the override moved the critics' scores

    unchanged = pull(sessions, annotate)
    assert set(unchanged.annotations) == {"unchanged"} and not unchanged.anchors.get("set")

    # a third annotator breaks the tie; the first annotator changes their mind
    ls.annotations.create(
        id=t_split, result=[cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, "failure")], completed_by=third.id
    )
    mine = next(a for a in ls.annotations.list(id=t_override))
    ls.annotations.update(
        id=mine.id, result=[cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, verifier or "success")]
    )
    changed = pull(sessions, annotate)
    assert changed.annotations["new"] == 1 and changed.annotations["updated"] == 1
    assert _deciding(sessions, e_split).label == "failure"  # type: ignore[union-attr]
    assert _deciding(sessions, e_override).source == "human"  # type: ignore[union-attr]
    with sessions() as s:
        assert (
            s.scalar(select(func.count()).select_from(Correction).where(Correction.episode_id == e_override))
            == 0
        )

    stats = annotation_stats(sessions)
    assert stats["inter_annotator"]["pairs"] == 3
    assert stats["human_vs_verifier"]["n"] == copies[e_override] + copies[e_split]
    # the critics are scored only on verdicts the annotators reached themselves, once per task
    independent = stats["independence"]["verdicts_independent"]
    assert stats["critics_vs_human"]["consensus:5"]["n"] <= 2 and independent >= 2
    assert label_studio.username in stats["throughput"]
    assert "inter-annotator: 1 tasks with 2+ verdicts" in render_stats(stats)

    # a task deleted in Label Studio withdraws what it said
    ls.tasks.delete(id=str(t_split))
    gone = pull(sessions, annotate)
    assert gone.tasks_deleted == 1 and gone.annotations["withdrawn"] == 3
    assert gone.anchors["removed"] == copies[e_split]
    assert _deciding(sessions, e_split).source == "verifier"  # type: ignore[union-attr]
    with sessions() as s:
        assert (
            s.scalar(select(AnnotationTask.status).where(AnnotationTask.episode_id == e_split)) == "deleted"
        )
    assert _deciding(sessions, e_skip).source == "verifier"  # type: ignore[union-attr]


def test_push_records_tasks_a_crashed_push_left_in_label_studio(
    label_studio: LabelStudioServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, sessions, round_id = _round(f"sqlite:///{tmp_path / 'crash.db'}", monkeypatch)
    annotate = _settings(label_studio, audit_fraction=1.0)
    store = open_object_store(settings)
    first = push_round(sessions, round_id, store, annotate, settings.s3, limit=3)
    assert sum(first.pushed.values()) == 3 and first.limited > 0
    with transaction(sessions) as s:  # as if the process died after the import, before recording it
        s.execute(delete(AnnotationTask))
    resumed = push_round(sessions, round_id, store, annotate, settings.s3, limit=2)
    assert resumed.recovered == 3 and sum(resumed.pushed.values()) == 2
    with sessions() as s:
        recorded = s.scalar(
            select(func.count()).select_from(AnnotationTask).where(AnnotationTask.duplicate_of.is_(None))
        )
    studio = Studio(annotate)
    listed: list[Any] = list(studio.ls.projects.list())
    projects = {p.title: p.id for p in listed if p.title.startswith(annotate.project_prefix)}
    in_ls = sum(len(list(studio.tasks(pid))) for pid in projects.values())
    assert recorded == in_ls == 5

    # a server that does not know the project (another instance or organisation) is an error, and
    # nothing is withdrawn: before, every task counted as deleted and its labels were gone for good
    with transaction(sessions) as s:
        for project in s.scalars(select(AnnotationProject)):
            project.ls_project_id += 100_000
    with pytest.raises(AnnotationError, match=r"has no project \d+ .*another instance or organisation"):
        pull(sessions, annotate)
    with sessions() as s:
        statuses = set(s.scalars(select(AnnotationTask.status).where(AnnotationTask.duplicate_of.is_(None))))
    assert statuses == {"pushed"}


def test_the_limit_takes_the_most_urgent_first_and_creates_no_empty_project(
    label_studio: LabelStudioServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, sessions, round_id = _round(f"sqlite:///{tmp_path / 'limit.db'}", monkeypatch)
    annotate = _settings(label_studio, audit_fraction=1.0, project_by="app")
    with sessions() as s:
        queue = review_queue(s, round_id, annotate)
    assert len({c.app for c in queue}) > 1  # several apps queued, so several projects were possible
    report = push_round(sessions, round_id, open_object_store(settings), annotate, settings.s3, limit=1)
    assert sum(report.pushed.values()) == 1 and report.limited > 0
    with sessions() as s:
        pushed = s.scalars(
            select(AnnotationTask.episode_id).where(AnnotationTask.duplicate_of.is_(None))
        ).one()
        keys = s.scalars(select(AnnotationProject.key)).all()
    key, title = project_key(annotate, queue[0].app)
    assert pushed == queue[0].episode_id and keys == [key]  # the most urgent, in its app's project only
    listed: list[Any] = list(Studio(annotate).ls.projects.list())
    ours = sorted(p.title for p in listed if p.title.startswith(annotate.project_prefix))
    assert ours == sorted([title, f"{annotate.project_prefix} · screenshots"])


def test_label_studio_failures_are_one_clear_error_and_write_nothing(
    label_studio: LabelStudioServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, sessions, round_id = _round(f"sqlite:///{tmp_path / 'fail.db'}", monkeypatch)
    store = open_object_store(settings)
    with pytest.raises(ConfigError, match="TRAJFORGE_ANNOTATE_API_KEY"):
        push_round(sessions, round_id, store, AnnotationSettings(url=label_studio.url), settings.s3)
    # every episode is queued (a blind audit), so each push has tasks to send
    wrong = _settings(label_studio, api_key="not-a-token-" + uuid.uuid4().hex, audit_fraction=1.0)
    with pytest.raises(AnnotationError, match="refused the access token"):
        push_round(sessions, round_id, store, wrong, settings.s3)
    closed = _settings(label_studio, url="http://127.0.0.1:9", timeout_s=2, audit_fraction=1.0)
    with pytest.raises(
        AnnotationError, match=r"not reachable at http://127\.0\.0\.1:9 .*TRAJFORGE_ANNOTATE_URL"
    ):
        push_round(sessions, round_id, store, closed, settings.s3)
    with sessions() as s:
        for table in (AnnotationTask, HumanAnnotation):
            assert s.scalar(select(func.count()).select_from(table)) == 0
