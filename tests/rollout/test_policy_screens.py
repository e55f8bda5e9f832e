"""Every built-in policy formats its action for the screen it observed, as the runner parses it: on
Chromium's 1082x2202 page (or any device size) a tap lands on the element the policy meant."""

from __future__ import annotations

import pytest

from rollout.policies.base import Policy, observed
from rollout.policies.knn import KnnPolicy
from rollout.policies.knn_memory import train
from rollout.policies.oracle import NoisyOracle, RandomExplorer
from tests.evolve.test_knn import _png, _row
from trajforge.actions import CODECS, DESKTOP_FORMATS, Action, ActionKind, Screen, get_codec
from trajforge.actions.compare import element_at
from trajforge.domain import Observation, Query

WIDTH, HEIGHT = 1082, 2202  # the web backend's Pixel 7 page; the default screen is 1080x2400
ROWS = [  # one target row low on the page, where a y scaled by 2400/2202 lands on the next row
    {
        "id": f"r{i}",
        "kind": "list_item",
        "widget": "funds",
        "value": name,
        "text": name,
        "bounds": [0, 1100 + 110 * i, WIDTH, 1100 + 110 * i + 100],
    }
    for i, name in enumerate(["Joint Household", "Travel Fund", "Rainy Day"])
]
QUERY = Query(
    uid="q",
    app="ledger",
    instruction="open Joint Household",
    path=[{"widget": "funds", "value": "Joint Household"}],
)


def _knn(fmt: str) -> Policy:
    demo = _row(_png(40), "open Joint Household", {"kind": "click", "point": [500, 520]}, None, 0, "e")
    return KnnPolicy(train([demo]), {"a": _png(40)}.__getitem__, fmt=fmt)


def _oracle(fmt: str) -> Policy:
    oracle = NoisyOracle(fmt=fmt)
    oracle.start(QUERY, seed="s")
    oracle._plan.popleft()  # already in the app: the next move is the row
    return oracle


POLICIES = {"knn": _knn, "oracle": _oracle}


@pytest.mark.parametrize("fmt", sorted(CODECS))
@pytest.mark.parametrize("make", sorted(POLICIES))
async def test_a_tap_lands_on_the_element_meant_on_a_non_default_screen(make: str, fmt: str) -> None:
    policy = POLICIES[make](fmt)
    if make == "knn":
        policy.start(QUERY, seed="s")
    obs = Observation(screenshot="a", width=WIDTH, height=HEIGHT, elements=ROWS)
    out = await policy.act(obs)
    action = get_codec(out.format).parse(out.text, observed(obs))
    assert action.kind == ActionKind.CLICK and action.point is not None
    hit = element_at(ROWS, action.point, Screen(WIDTH, HEIGHT))
    assert hit is not None and hit["text"] == "Joint Household", (out.text, action.point)


@pytest.mark.parametrize("fmt", sorted(set(CODECS) - set(DESKTOP_FORMATS)))  # a phone's explorer
async def test_the_random_explorer_taps_inside_what_it_picked(fmt: str) -> None:
    explorer = RandomExplorer(fmt=fmt)
    obs = Observation(screenshot="a", width=WIDTH, height=HEIGHT, elements=ROWS)
    taps = 0
    for seed in range(40):
        explorer.start(QUERY, seed=str(seed))
        out = await explorer.act(obs)
        action = get_codec(out.format).parse(out.text, observed(obs))
        if action.kind == ActionKind.CLICK and action.point is not None:
            taps += 1
            hit = element_at(ROWS, action.point, Screen(WIDTH, HEIGHT))
            assert hit is not None and abs(action.point[1] * HEIGHT / 1000 - _centre(hit)) <= 3
    assert taps > 10


def _centre(element: dict) -> float:
    return (element["bounds"][1] + element["bounds"][3]) / 2


async def test_on_a_desktop_the_built_in_policies_say_desktop_actions() -> None:
    """A phone's back and swipe are a desktop's Escape and wheel, said in the desktop format."""
    from rollout.policies.base import DESKTOP_FORMAT, desktop_form

    explorer = RandomExplorer()
    obs = Observation(screenshot="a", width=WIDTH, height=HEIGHT, elements=ROWS, meta={"backend": "desktop"})
    said = []
    for seed in range(40):
        explorer.start(QUERY, seed=str(seed))
        out = await explorer.act(obs)
        assert out.format == DESKTOP_FORMAT
        said.append(get_codec(out.format).parse(out.text, observed(obs)))
    kinds = {a.kind for a in said}
    assert ActionKind.CLICK in kinds and ActionKind.SWIPE not in kinds
    assert all(a.key == "enter" for a in said if a.kind == ActionKind.PRESS)  # no phone's back: Escape
    swipe = Action(kind=ActionKind.SWIPE, point=(500, 600), direction="up")
    assert desktop_form(swipe) == Action(kind=ActionKind.SCROLL, point=(500, 600), direction="down")
    assert desktop_form(Action(kind=ActionKind.PRESS, key="back")) == Action(
        kind=ActionKind.HOTKEY, text="escape"
    )
