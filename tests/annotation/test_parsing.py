"""Annotation logic that needs no Label Studio: results, resolution, agreement, images, the queue."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.images import ImageLinks, image_mode, overlay
from annotation.pull import parse_correction, parse_result, resolve
from annotation.push import review_queue
from annotation.stats import inter_annotator
from storage.db import insert_ignore, transaction
from storage.models import Anchor, Judgment
from storage.objectstore import LocalObjectStore, put_blob
from tests.support.spine import seed_episodes
from trajforge.actions import Screen
from trajforge.errors import ConfigError
from trajforge.settings import AnnotationSettings


def test_parse_result_reads_verdict_step_labels_and_corrections() -> None:
    parsed = parse_result(
        [
            {"from_name": cfg.VERDICT, "type": "choices", "value": {"choices": ["failure"]}},
            {"from_name": cfg.step_label(0), "type": "choices", "value": {"choices": ["GOOD"]}},
            {"from_name": cfg.step_label(1), "type": "choices", "value": {"choices": ["BRILLIANT"]}},
            {"from_name": cfg.corrected_action(1), "type": "textarea", "value": {"text": [" tap it "]}},
            {"from_name": cfg.corrected_thought(1), "type": "textarea", "value": {"text": ["Open the menu"]}},
            {"from_name": "comment", "type": "textarea", "value": {"text": ["?"]}},
        ]
    )
    assert parsed.verdict == "failure"
    assert parsed.step_labels == {"0": "GOOD"}
    assert parsed.actions == {1: "tap it"} and parsed.thoughts == {1: "Open the menu"}
    assert parsed.ignored == {"bad_step_label": 1, "unknown_field": 1}


def test_corrections_parse_in_any_known_format_or_keep_a_reason() -> None:
    screen = Screen(1080, 2400)
    canonical = parse_correction('{"kind":"click","point":[500,300]}', screen)
    assert canonical == ({"kind": "click", "point": [500, 300]}, "canonical", None)
    uitars = parse_correction("click(start_box='(540,720)')", screen)  # UI-TARS uses 0-1000 too
    assert uitars == ({"kind": "click", "point": [540, 720]}, "uitars", None)
    assert parse_correction("press the blue thing", screen) == (None, None, "unparseable_correction")


def _votes(*labels: str) -> list[tuple[str, str, datetime]]:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    return [(f"a{i}", label, t0 + timedelta(minutes=i)) for i, label in enumerate(labels)]


@pytest.mark.parametrize(
    ("rule", "labels", "expected"),
    [
        ("majority", ("success", "failure", "success"), ("success", "")),
        ("majority", ("success", "failure"), (None, "tie")),
        ("majority", ("unsure", "failure"), ("failure", "")),
        ("majority", ("unsure",), (None, "unsure")),
        ("majority", (), (None, "no_verdict")),
        ("latest", ("success", "failure"), ("failure", "")),
        ("latest", ("failure", "unsure"), (None, "unsure")),
        ("unanimous", ("failure", "failure", "unsure"), ("failure", "")),
        ("unanimous", ("failure", "success"), (None, "disagreement")),
    ],
)
def test_resolution_rules(rule: str, labels: tuple[str, ...], expected: tuple[str | None, str]) -> None:
    assert resolve(_votes(*labels), rule) == expected


def test_inter_annotator_agreement_and_kappa() -> None:
    perfect = inter_annotator({1: ["success", "success"], 2: ["failure", "failure"], 3: ["success"]})
    assert perfect == {"tasks": 2, "pairs": 2, "agreement": 1.0, "kappa": 1.0}
    split = inter_annotator({1: ["success", "failure"], 2: ["failure", "success"]})
    assert split["agreement"] == 0.0 and split["kappa"] == pytest.approx(-1.0)
    three = inter_annotator({1: ["success", "success", "failure"]})
    assert three["pairs"] == 3 and three["agreement"] == pytest.approx(1 / 3)


def _png(width: int = 540, height: int = 1200) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format="PNG")
    return buf.getvalue()


def test_overlay_circles_the_action_point_and_scales_down() -> None:
    jpeg = overlay(_png(), {"kind": "click", "point": [500, 500]}, max_side=600)
    img = Image.open(io.BytesIO(jpeg)).convert("RGB")
    assert img.size == (270, 600)
    # the circle's rim passes left of the centre: some pixel on that row is red
    row = [img.getpixel((x, 300)) for x in range(0, 135)]
    assert any(p[0] > 200 and p[1] < 80 and p[2] < 80 for p in row)  # type: ignore[index]
    plain = Image.open(io.BytesIO(overlay(_png(), None, max_side=600))).convert("RGB")
    assert all(min(plain.getpixel((x, 300))) > 240 for x in range(0, 135))  # type: ignore[arg-type]


def test_image_links_on_the_local_store_are_data_urls_and_s3_modes_are_refused(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    sha, _ = put_blob(store, _png())
    links = ImageLinks(store, AnnotationSettings())
    assert links.mode == "data"
    assert links(sha, {"kind": "click", "point": [10, 10]}).startswith("data:image/jpeg;base64,")
    for mode in ("presign", "storage"):
        with pytest.raises(ConfigError, match="needs the S3 object store"):
            image_mode(AnnotationSettings(images=mode), store)


def test_review_queue_takes_disagreements_low_confidence_and_an_audit_sample(
    sessions: sessionmaker[Session],
) -> None:
    ids = seed_episodes(sessions, 5)
    episode = [
        # (textual, visual, consensus, consensus score, verifier)
        ("correct", "correct", "correct", None, "success"),  # agreed with the verifier: audit only
        ("correct", "incorrect", "incorrect", None, "failure"),  # channels disagree
        ("correct", "correct", "correct", None, "failure"),  # the verifier disagrees
        ("unparsed", "correct", "correct", None, "success"),  # unparsed verdict
        ("correct", "correct", "correct", 0.4, "success"),  # low confidence
    ]
    with transaction(sessions) as s:
        from storage.models import Episode

        for eid in ids:
            s.get(Episode, eid).status = "done"  # type: ignore[union-attr]
        rows = []
        for eid, (textual, visual, agreed, score, verifier) in zip(ids, episode, strict=True):
            for critic, label, sc in (
                ("heuristic_textual", textual, None),
                ("heuristic_visual", visual, None),
                ("consensus_and", agreed, score),
            ):
                rows.append(
                    {
                        "critic": critic,
                        "critic_version": "3",  # the current consensus version
                        "target": "episode",
                        "target_id": eid,
                        "label": label,
                        "score": sc,
                    }
                )
            s.add(Anchor(episode_id=eid, source="verifier", label=verifier))
        insert_ignore(s, Judgment, rows, ["critic", "critic_version", "target", "target_id"])
    with sessions() as s:
        none = review_queue(s, 1, AnnotationSettings(audit_fraction=0.0))
        every = review_queue(s, 1, AnnotationSettings(audit_fraction=1.0))
    assert [c.reasons for c in none] == [
        ["verifier_disagreement"],
        ["channel_disagreement"],
        ["unparsed"],
        ["low_confidence"],
    ]
    assert [c.episode_id for c in none] == [ids[2], ids[1], ids[3], ids[4]]
    assert every[-1].reasons == ["audit"] and every[-1].episode_id == ids[0]
