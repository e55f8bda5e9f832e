"""The critic view carries nothing a critic must not see; the learned critic fits, and judges every
episode with a model that never saw its query."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import critics.learned as learned
from bench.halves import TUNING, app_half
from critics.episode_features import FEATURES, SIGNS, features
from critics.learned import Checkpoint, TrainRow, cross_judge, fit, fit_all, fold_of
from critics.learned_steps import step_verdicts
from critics.prior import prior_rows, with_prior
from critics.task_words import clauses
from critics.view import CriticView, critic_view
from trajforge.domain import SeenElement, StepVerdict, StepView
from trajforge.episode import Step

# what a critic is never shown: the spec's ids and slots, the query's path and goal, the anchor
HIDDEN = {"id", "widget", "value", "slot", "slots", "path", "goal", "screen", "verifier", "anchor", "success"}


def test_view_types_have_no_field_for_hidden_state() -> None:
    for kind in (CriticView, StepView, SeenElement):
        names = {f.name for f in dataclasses.fields(kind)}
        assert not names & HIDDEN, f"{kind.__name__} carries {names & HIDDEN}"


def _step(action: dict, elements: list[dict], after: str = "b") -> Step:  # as the simulator records it
    return Step(
        index=0,
        screenshot="a",
        screenshot_after=after,
        width=1000,
        height=2000,
        raw_output='{"action": "click"}',
        elements=elements,
        action=action,
    )


def test_a_stored_tree_reaches_the_critic_without_spec_fields() -> None:
    node = {
        "id": "tip",
        "widget": "tip",
        "value": "15%",
        "kind": "list_item",
        "text": "15%",
        "bounds": [0, 0, 9, 9],
    }
    view = critic_view("Tip 15%", [_step({"kind": "click", "point": [1, 1]}, [node])])
    (element,) = view.steps[0].seen
    assert element == SeenElement("15%", "list_item", (0, 0, 9, 9))
    assert "tip" not in json.dumps(dataclasses.asdict(view)).replace("Tip", "")


def test_a_tap_beside_a_button_goes_to_the_nearest_within_the_touch_slop() -> None:
    ok = SeenElement("OK", "button", (100, 100, 300, 200))
    far = SeenElement("Cancel", "button", (700, 100, 900, 200))
    tree = [dataclasses.asdict(ok), dataclasses.asdict(far)]
    near = StepView({"kind": "click", "point": [310, 70]}, None, "a", "b", tree, 1000, 2000)  # 10 px off
    assert near.touched() == ok
    away = StepView({"kind": "click", "point": [500, 70]}, None, "a", "b", tree, 1000, 2000)
    assert away.touched() is None


def test_clauses_split_the_task_into_its_parts() -> None:
    assert clauses("Open Settings, then open Sound, then open Ring volume") == [
        {"open", "settings"},
        {"open", "sound"},
        {"open", "ring", "volume"},
    ]


def _view(
    action: dict, before: str, after: str, elements: tuple[SeenElement, ...], width: int, height: int
) -> StepView:
    """A step as a critic sees it, its tree given as the device reports it."""
    return StepView(action, None, before, after, [dataclasses.asdict(e) for e in elements], width, height)


def _episode(instruction: str, tapped: str, claim: bool) -> CriticView:
    button = SeenElement(tapped, "button", (0, 0, 1000, 100))
    other = SeenElement("Elsewhere", "button", (0, 500, 1000, 600))
    steps = [_view({"kind": "click", "point": [500, 25]}, "s0", "s1", (button, other), 1000, 2000)]
    if claim:
        steps.append(_view({"kind": "terminate", "status": "success"}, "s1", "s1", (), 1000, 2000))
    return CriticView(instruction, tuple(steps))


def _data(n: int) -> list[tuple[str, list[float], bool]]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        right = bool(rng.random() < 0.5)
        view = _episode(f"Open Report {i}", f"Report {i}" if right else "Elsewhere", claim=True)
        out.append((f"q{i % 17}", features(view), right))
    return out


def test_the_fit_learns_what_the_task_named_from_observations_alone() -> None:
    train = _data(60)
    model = fit(np.array([x for _, x, _ in train]), np.array([float(y) for *_, y in train]))
    assert model is not None and model.features == FEATURES and model.trained_on == 60
    right, wrong = (
        features(_episode("Open Budget", "Budget", True)),
        features(_episode("Open Budget", "Elsewhere", True)),
    )
    p_right, p_wrong = model.prob(np.array([right, wrong]))
    assert p_right > 0.9 and p_wrong < 0.1
    again = Checkpoint.from_json(model.to_json())
    assert again == model and again.version == model.version


def test_too_few_anchors_or_one_outcome_fit_nothing() -> None:
    x = np.zeros((30, len(FEATURES)))
    assert fit(x, np.ones(30)) is None
    assert fit(x[:3], np.array([0.0, 1.0, 0.0])) is None
    assert fit(np.array([]), np.array([])) is None  # a home with no anchors yet: no columns to count


def test_every_episode_is_judged_by_a_model_that_never_saw_its_query(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    # a feature free to point either way carries the signal
    signal = next(i for i, f in enumerate(FEATURES) if SIGNS[f] == 0)

    def row(i: int) -> list[float]:  # the first column names the row
        x = [0.0] * len(FEATURES)
        x[0], x[signal] = float(i), float(rng.normal(1 if i % 3 else -1))
        return x

    train = [TrainRow(f"q{i % 23}", f"app{i % 2}", row(i), bool(i % 3)) for i in range(120)]
    prior = [TrainRow(None, "elsewhere", row(1000 + i), bool(i % 2)) for i in range(10)]
    rows_of_fit: list[set[int]] = []
    real_fit = learned.fit

    def spying(x: np.ndarray, y: np.ndarray, ridge: float = learned.RIDGE) -> Checkpoint | None:
        rows_of_fit.append({int(r[0]) for r in x})
        return real_fit(x, y, ridge)

    monkeypatch.setattr(learned, "fit", spying)
    predictions = cross_judge(train + prior, [(r.query or "", r.app, r.x) for r in train])
    folds = sorted({fold_of(r.query or "") for r in train})  # two fits a fold: shared, then unseen
    fits = {f: rows_of_fit[2 * i] | rows_of_fit[2 * i + 1] for i, f in enumerate(folds)}
    assert len(rows_of_fit) == 2 * len(folds)
    for query in {r.query for r in train}:
        own = {i for i, r in enumerate(train) if r.query == query}
        assert not own & fits[fold_of(query or "")]  # no episode of the query trained its judge
        assert set(range(1000, 1010)) <= fits[fold_of(query or "")]  # the prior's rows train every fold
    assert all(p.success is not None and p.model for p in predictions)
    assert np.mean([p.success == r.success for p, r in zip(predictions, train, strict=True)]) > 0.8


def test_a_feature_never_turns_its_evidence_around() -> None:
    rng = np.random.default_rng(2)
    y = (rng.random(200) < 0.5).astype(float)
    x = np.zeros((200, len(FEATURES)))
    free = next(i for i, f in enumerate(FEATURES) if SIGNS[f] == 0)  # may point either way
    x[:, free] = y + rng.normal(0, 0.5, 200)
    covered = FEATURES.index("covered_by_actions")  # evidence for success only, here against it
    x[:, covered] = 1 - y + rng.normal(0, 0.5, 200)
    model = fit(x, y)
    assert model is not None and model.weights[covered] == 0.0
    assert model.weights[free] > 0
    # columns of its own, each with its sign (bench.critic_ceiling's app-centred copies)
    held = fit(x[:, [free, covered]], y, signs={"free": 0, "for_success": 1})
    assert held is not None and held.features == ("free", "for_success")
    assert held.weights[1] == 0.0 and held.weights[0] > 0
    turned = fit(x[:, [free, covered]], y, signs={"free": 0, "for_failure": -1})
    assert turned is not None and turned.weights[1] < 0
    with pytest.raises(ValueError, match="one sign per column"):
        fit(x[:, [free]], y, signs={"free": 0, "for_success": 1})


def test_the_innermost_element_under_the_finger_takes_the_tap() -> None:
    paragraph = SeenElement("Lorem ipsum Vulputate dolor", "text", (0, 0, 1000, 400))
    link = SeenElement("Vulputate", "link", (300, 100, 500, 150))
    step = _view({"kind": "click", "point": [400, 60]}, "a", "b", (paragraph, link), 1000, 2000)
    assert step.touched() == link


def test_step_labels_follow_the_change_of_the_critics_value() -> None:
    train = _data(60)
    model = fit(np.array([x for _, x, _ in train]), np.array([float(y) for *_, y in train]))
    right, wrong = _episode("Open Budget", "Budget", True), _episode("Open Budget", "Elsewhere", True)
    assert [v.label for v in step_verdicts(None, right)] == ["NEUTRAL", "NEUTRAL"]  # untrained: no opinion
    assert step_verdicts(model, right)[-1] == StepVerdict(
        "GOOD", "completes_task", "Ends the episode (completes_task)."
    )
    labels = step_verdicts(model, wrong)
    assert labels[-1].reason == "premature_stop" and labels[-1].label == "HARMFUL"


def _run(instruction: str, *taps: tuple[SeenElement, tuple[SeenElement, ...]], back: bool = False) -> dict:
    """The features of a run that taps each element on its screen, optionally presses back, then
    claims success on the screen its last action left."""
    steps = [
        _view(
            {"kind": "click", "point": [e.bounds[0] + 1, e.bounds[1] + 1]},
            f"s{i}",
            f"s{i + 1}",
            screen,
            1000,
            1000,
        )
        for i, (e, screen) in enumerate(taps)
    ]
    end = taps[-1][1]
    if back:
        steps.append(_view({"kind": "press", "key": "back"}, "s8", "s9", end, 1000, 1000))
    steps.append(_view({"kind": "terminate", "status": "success"}, "s9", "s9", end, 1000, 1000))
    return dict(zip(FEATURES, features(CriticView(instruction, tuple(steps))), strict=True))


def _el(text: str, row: int, role: str = "list_item", checked: bool | None = None) -> SeenElement:
    return SeenElement(text, role, (0, row * 100, 1000, row * 100 + 90), checked=checked)


def test_a_named_element_shown_but_never_tapped_counts_against_the_run() -> None:
    fries, home, office = _el("Fries", 0), _el("Home", 1), _el("Office", 2)
    skipped = _run("Order Fries, deliver to Home", (fries, (fries,)), (office, (home, office)))
    done = _run("Order Fries, deliver to Home", (fries, (fries,)), (home, (home, office)))
    assert skipped["named_untouched"] == 0.5 and skipped["every_clause_acted"] == 0.0
    assert (
        done["named_untouched"] == 0.0 and done["named_touched"] == 1.0 and done["every_clause_acted"] == 1.0
    )


def test_a_label_prefix_cjk_text_and_an_empty_field_named_by_its_role_are_named() -> None:
    black = _el("Color: Black", 0)
    assert _run("Buy the MacBook Air in Black", (black, (black,)))["named_touched"] == 1.0
    station = _el("北京西站", 0)
    assert _run("从北京南站叫车去鸟巢", (station, (station, _el("鸟巢", 1))))["named_untouched"] == 1.0
    field = _el("", 0, role="input")
    assert _run("Focus into the textbox.", (field, (field,)))["named_touched"] == 1.0


def test_a_named_switch_must_end_as_the_task_asks() -> None:
    off, on = _el("Wi-Fi", 0, "toggle", checked=False), _el("Wi-Fi", 0, "toggle", checked=True)
    assert _run("Turn Wi-Fi off", (on, (off,)))["named_state_as_asked"] == 1.0
    assert _run("Turn Wi-Fi off", (off, (on,)))["named_state_not_as_asked"] == 1.0
    picked, other = _el("Jjjo", 0, "toggle", checked=False), _el("7B", 1, "toggle", checked=True)
    assert _run("Select Jjjo and click Submit.", (other, (picked, other)))["named_state_not_as_asked"] == 1.0


def test_backing_out_of_the_goal_and_committing_after_it_are_told_apart() -> None:
    sound = _el("Sound", 0)
    left = _run("Open Settings, then open Sound", (sound, (sound,)), back=True)
    assert left["last_move_away"] == 1.0 and left["away_share"] > 0
    office, order = _el("Office", 0), _el("Place order", 1, "button")
    placed = _run("Send 2 Fries to Office", (office, (office, order)), (order, (order,)))
    assert placed["acted_after_last_clause"] == 0.0 and placed["last_touch_unnamed"] == 0.0


def test_a_part_that_asks_for_typing_is_done_only_by_typing_its_words() -> None:
    def typed(text: str) -> dict:
        box = _el("Search products", 0, "input")
        steps = (
            _view({"kind": "click", "point": [1, 1]}, "s0", "s1", (box,), 1000, 1000),
            _view({"kind": "type", "text": text}, "s1", "s2", (box,), 1000, 1000),
        )
        return dict(
            zip(FEATURES, features(CriticView("Search for noise cancelling headphones", steps)), strict=True)
        )

    assert typed("noise cancelling headphones")["typing_asked_not_done"] == 0.0
    assert typed("headphones")["typing_asked_not_done"] == 1.0
    field = _el("Password", 0, "input")
    join = _run("Join CoffeeBar with the password hunter22", (field, (field,)))
    assert join["typing_asked_not_done"] == 1.0  # a password is typed, whether or not the task says so


def test_an_apps_correction_reads_what_only_its_own_episodes_show() -> None:
    """Where a feature means the opposite on one app (a covered task that fails there), the shared model
    keeps its sign, the app's own correction turns it, and an app never seen gets the shared model."""
    rng = np.random.default_rng(3)
    covered = FEATURES.index("covered_by_actions")
    rows = []
    for i in range(240):
        app, success = ("odd" if i % 3 == 0 else "usual"), bool(rng.random() < 0.5)
        row = [0.0] * len(FEATURES)
        row[covered] = float(success != (app == "odd")) + rng.normal(0, 0.2)
        rows.append(TrainRow(f"q{i}", app, row, success))
    model = fit_all(rows)
    assert model is not None and set(model.apps) == {"odd", "usual"} and model.weights[covered] > 0
    odd = [r for r in rows if r.app == "odd"]
    x, y = np.array([r.x for r in odd]), np.array([r.success for r in odd])
    assert np.mean((model.prob(x, "odd") >= 0.5) == y) > 0.9
    assert np.mean((model.prob(x, "new") >= 0.5) == y) < 0.1  # unseen: the shared model's reading
    assert Checkpoint.from_json(model.to_json()) == model


def test_the_prior_judges_only_apps_the_home_has_not_anchored() -> None:
    """The shared model and the apps' corrections are the home's alone; the prior's rows (the left-out
    app's removed) train the model an app without a correction gets, and do not let the critic
    vote before the home has anchors of both outcomes."""
    own = [TrainRow(q, "mine", x, y) for q, x, y in _data(20)]
    app = prior_rows()[0].app
    rows = with_prior(own, leave_out=app)
    assert len(rows) == len(own) + sum(r.app != app for r in prior_rows())
    model, alone = fit_all(rows), fit_all(own)
    assert model is not None and alone is not None and model.unseen is not None and alone.unseen is None
    assert dataclasses.replace(model, unseen=None) == alone  # the home's own part, untouched by the prior
    x = np.array([r.x for r in prior_rows()[:20]])
    assert np.allclose(model.prob(x, "mine"), alone.prob(x, "mine"))
    assert np.allclose(model.prob(x, app), model.unseen.prob(x))
    assert fit_all(with_prior(own[:5])) is None and fit_all(with_prior([r for r in own if r.success])) is None


def test_the_shipped_prior_has_the_critics_features_and_no_reporting_app() -> None:
    """Changing the features without writing the prior again fails here (`python -m bench.critic_prior`)."""
    rows = prior_rows()  # raises on other features
    assert {r.success for r in rows} == {True, False}
    assert {app_half(r.app) for r in rows} == {TUNING}
