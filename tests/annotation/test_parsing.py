"""Annotation logic that needs no Label Studio: results, resolution, agreement, images, the queue."""

from __future__ import annotations

import io
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy.orm import Session, sessionmaker

from annotation import config as cfg
from annotation.images import ImageLinks, image_mode, overlay
from annotation.pull import resolve
from annotation.queue import Candidate, _teaching, review_queue, teaching_order
from annotation.results import clicked_action, independence, parse_correction, parse_result
from annotation.stats import inter_annotator
from storage.db import insert_ignore, transaction
from storage.models import Anchor, Judgment
from storage.objectstore import LocalObjectStore, put_blob
from tests.support.spine import seed_episodes
from trajforge.actions import Action, ActionKind, Screen
from trajforge.errors import ConfigError
from trajforge.settings import AnnotationSettings
from trajforge.verdicts import CONSENSUS


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


def _point(i: int, kind: str, x: float, y: float) -> dict[str, object]:
    return {
        "from_name": cfg.correct_point(i),
        "to_name": cfg.screen(i),
        "type": "keypointlabels",
        "value": {"x": x, "y": y, "width": 1.5, "keypointlabels": [kind]},
    }


def test_parse_result_reads_clicks_instructions_and_the_first_wrong_step() -> None:
    parsed = parse_result(
        [
            {"from_name": cfg.FIRST_WRONG, "type": "number", "value": {"number": 3}},
            _point(2, "swipe_start", 50.0, 80.04),
            _point(2, "swipe_end", 50.0, 19.96),
            _point(4, "teleport", 10.0, 10.0),
            {
                "from_name": cfg.corrected_instruction(2),
                "type": "textarea",
                "value": {"text": ["Scroll down"]},
            },
        ]
    )
    assert parsed.first_wrong_step == 3
    assert parsed.points == {2: [("swipe_start", 500, 800), ("swipe_end", 500, 200)]}  # percent -> per mille
    assert parsed.instructions == {2: "Scroll down"}
    assert parsed.ignored == {"bad_keypoint": 1}
    assert parse_result([{"from_name": cfg.FIRST_WRONG, "value": {"number": -1}}]).ignored == {
        "bad_first_wrong_step": 1
    }


def test_clicks_become_one_action_or_a_reason() -> None:
    assert clicked_action([("click", 120, 340)]) == ({"kind": "click", "point": [120, 340]}, None)
    assert clicked_action([("long_press", 1, 2)]) == ({"kind": "long_press", "point": [1, 2]}, None)
    swipe = clicked_action([("swipe_end", 500, 200), ("swipe_start", 500, 800)])
    assert swipe == ({"kind": "swipe", "point": [500, 800], "to": [500, 200]}, None)
    assert clicked_action([("swipe_start", 5, 5)]) == (None, "incomplete_swipe")
    assert clicked_action([("click", 1, 1), ("click", 2, 2)]) == (None, "ambiguous_clicks")


def test_labels_equal_to_the_prefill_are_not_independent() -> None:
    prefill = {"verdict": "success", "steps": {"0": "GOOD", "1": "GOOD"}}
    accepted = parse_result(
        [cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, "success")]
        + [cfg.choice(cfg.step_label(i), cfg.screen(i), "GOOD") for i in (0, 1)]
    )
    flag = independence(accepted, prefill)
    assert (flag.verdict, flag.steps, flag.accepted_as_is) == (False, [], True)
    changed = parse_result(
        [
            cfg.choice(cfg.VERDICT, cfg.INSTRUCTION, "failure"),
            cfg.choice(cfg.step_label(0), cfg.screen(0), "GOOD"),
            cfg.choice(cfg.step_label(1), cfg.screen(1), "HARMFUL"),
        ]
    )
    flag = independence(changed, prefill)
    assert (flag.verdict, flag.steps, flag.accepted_as_is) == (True, [1], False)
    blind = independence(accepted, None)  # nothing was shown: all of it is the annotator's
    assert (blind.verdict, blind.steps, blind.accepted_as_is) == (True, [0, 1], False)


def test_the_placeholder_action_parses_and_states_the_coordinates() -> None:
    assert parse_correction(cfg.EXAMPLE_ACTION, Screen(1080, 2400))[2] is None
    assert "per mille" in cfg.LABEL_CONFIG and "{{idx}}" in cfg.LABEL_CONFIG
    assert 'mode="pagination"' in cfg.LABEL_CONFIG


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
    assert inter_annotator({1: ["success", "success"]})["kappa"] is None  # one label: undefined, not 1
    split = inter_annotator({1: ["success", "failure"], 2: ["failure", "success"]})
    assert split["agreement"] == 0.0 and split["kappa"] == pytest.approx(-1.0)
    three = inter_annotator({1: ["success", "success", "failure"]})
    assert three["pairs"] == 3 and three["agreement"] == pytest.approx(1 / 3)


def _png(width: int = 540, height: int = 1200) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format="PNG")
    return buf.getvalue()


def test_overlay_circles_the_action_point_and_scales_down() -> None:
    jpeg = overlay(_png(), Action(kind=ActionKind.CLICK, point=(500, 500)), max_side=600)
    img = Image.open(io.BytesIO(jpeg)).convert("RGB")
    assert img.size == (270, 600)
    # the circle's rim passes left of the centre: some pixel on that row is red
    row = [img.getpixel((x, 300)) for x in range(0, 135)]
    assert any(p[0] > 200 and p[1] < 80 and p[2] < 80 for p in row)  # type: ignore[index]
    plain = Image.open(io.BytesIO(overlay(_png(), None, max_side=600))).convert("RGB")
    assert all(min(plain.getpixel((x, 300))) > 240 for x in range(0, 135))  # type: ignore[arg-type]


TAP = Action(kind=ActionKind.CLICK, point=(10, 10))


def test_image_links_on_the_local_store_are_uploads_or_data_urls_and_s3_modes_are_refused(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path)
    sha, _ = put_blob(store, _png())
    sent: list[list[tuple[str, bytes]]] = []

    def upload(files: list[tuple[str, bytes]]) -> dict[str, str]:
        sent.append(files)
        return {name: f"/data/upload/1/abcd-{name}" for name, _ in files}

    links = ImageLinks(store, AnnotationSettings(), upload=upload)
    assert links.mode == "upload"
    marked = links(sha, TAP)
    plain = links(sha)
    task: dict[str, Any] = {"steps": [{"image": marked, "after": plain}], "html": f'<img src="{marked}"/>'}
    assert not sent  # nothing is uploaded until the batch is resolved
    resolved = links.resolve([(task, None)])
    assert len(sent) == 1 and len(sent[0]) == 2  # both images, in one upload
    ((got, _),) = resolved
    url = got["steps"][0]["image"]
    assert url.startswith("/data/upload/1/abcd-") and url.endswith(".jpg") and url in got["html"]
    assert got["steps"][0]["after"] != url
    assert links(sha, TAP) == url  # known now: no second upload
    assert links.resolve([]) == [] and len(sent) == 1
    assert Image.open(io.BytesIO(sent[0][0][1])).format == "JPEG"
    with pytest.raises(ConfigError, match="needs a Label Studio project"):
        ImageLinks(store, AnnotationSettings())
    data = ImageLinks(store, AnnotationSettings(images="data"))
    assert data(sha, TAP).startswith("data:image/jpeg;base64,")
    for mode in ("presign", "storage"):
        with pytest.raises(ConfigError, match="needs the S3 object store"):
            image_mode(AnnotationSettings(images=mode), store)


def test_a_swipe_is_drawn_as_an_arrow_that_ends_where_the_finger_ends() -> None:
    jpeg = overlay(_png(), Action(kind=ActionKind.SWIPE, point=(500, 800), to=(500, 200)), max_side=600)
    img = Image.open(io.BytesIO(jpeg)).convert("RGB")

    def red_width(y: int) -> int:
        return sum(1 for x in range(270) if _red(img.getpixel((x, y))))

    # the arrowhead is wide just below the end (y=120) and the shaft is thin mid-way (y=300)
    assert red_width(135) > 2 * red_width(300) > 0


def _red(pixel: Any) -> bool:
    return bool(pixel[0] > 200 and pixel[1] < 80 and pixel[2] < 80)


def test_review_queue_takes_disagreements_low_confidence_and_an_audit_sample(
    sessions: sessionmaker[Session],
) -> None:
    ids = seed_episodes(sessions, 6)
    episode = [
        # (learned, visual, consensus, consensus score, verifier)
        ("correct", "correct", "correct", None, "success"),  # agreed with the verifier: audit only
        ("correct", "incorrect", "incorrect", None, "failure"),  # channels disagree
        ("correct", "correct", "correct", None, "failure"),  # the verifier disagrees
        ("unparsed", "correct", "correct", None, "success"),  # unparsed verdict
        ("correct", "correct", "correct", 0.4, "success"),  # low confidence
        ("incorrect", "correct", "correct", 0.7, "success"),  # channels disagree, the consensus unsure
    ]
    with transaction(sessions) as s:
        from storage.models import Episode

        for eid in ids:
            s.get(Episode, eid).status = "done"  # type: ignore[union-attr]
        rows = []
        for eid, (textual, visual, agreed, score, verifier) in zip(ids, episode, strict=True):
            for critic, label, sc in (
                ("learned_trajectory", textual, None),
                ("heuristic_visual", visual, None),
                (CONSENSUS[0], agreed, score),
            ):
                rows.append(
                    {
                        "critic": critic,
                        "critic_version": CONSENSUS[1],  # the current consensus version
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
        ["channel_disagreement"],
        ["unparsed"],
        ["low_confidence"],
    ]
    # within a reason, the least sure consensus first: its verdict teaches the critics the most
    assert [c.episode_id for c in none] == [ids[2], ids[5], ids[1], ids[3], ids[4]]
    assert every[-1].reasons == ["audit"] and every[-1].episode_id == ids[0]


def test_teaching_order_asks_the_most_confident_verdicts_first_taking_turns_between_the_two() -> None:
    ranked = [(1, 0.6, True), (2, 0.99, True), (3, 0.9, False), (4, 0.95, True), (5, 0.7, False)]
    assert teaching_order(ranked) == [2, 3, 4, 5, 1]
    assert teaching_order([(7, 0.5, False), (8, 0.8, False)]) == [8, 7]  # one verdict only: by confidence
    assert teaching_order([]) == []


def test_undecided_episodes_are_queued_for_the_tasks_with_fewest_labels_first_taking_turns() -> None:
    made = [
        Candidate(i, f"u{i}", app, ["no_outcome"], confidence, verdict)
        for i, app, confidence, verdict in (
            (1, "a", 0.99, True), (2, "a", 0.9, False), (3, "a", 0.8, True),
            (4, "b", 0.7, True), (5, "b", 0.95, True),
        )
    ]  # fmt: skip
    order = [c.episode_id for c in _teaching(made, Counter({"a": 5, "b": 1}))]
    assert order == [5, 1, 4, 2, 3]  # b has fewer labels: its most confident first, then a's, in turns
