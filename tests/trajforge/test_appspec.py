"""App specs: every built-in app validates; each rejection rule has its own clear message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trajforge.appspec import builtin_app_names, load_app, load_apps, load_spec, parse_spec, spec_sha256
from trajforge.errors import SpecError

BASE: dict[str, Any] = {
    "name": "mini",
    "title": "Mini",
    "start": "home",
    "slots": {"dish": ["Fries", "Salad"], "wifi": ["on", "off"]},
    "screens": {
        "home": {
            "title": "Home",
            "description": "start",
            "widgets": [{"id": "dishes", "kind": "list", "slot": "dish", "goto": "cart"}],
        },
        "cart": {
            "title": "Cart",
            "description": "the cart",
            "widgets": [{"id": "pay", "kind": "button", "label": "Pay {dish}", "goto": "done"}],
        },
        "done": {
            "title": "Done",
            "description": "paid",
            "terminal": True,
            "widgets": [{"id": "wifi", "kind": "toggle", "slot": "wifi", "label": "Wi-Fi"}],
        },
    },
}


def spec_with(edit) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    edit(data)
    return data


def test_builtin_apps_validate() -> None:
    names = builtin_app_names()
    assert names == ["ridehail", "settings", "shopping", "takeout"]
    locales = {load_app(n).locale for n in names}
    assert locales == {"en", "zh"}


def test_base_spec_is_valid() -> None:
    spec = parse_spec(BASE, "mini.yaml")
    assert spec.edges() == [("home", "dishes", "cart"), ("cart", "pay", "done")]


RULES = [
    (
        "cycle",
        lambda d: d["screens"]["done"]["widgets"].append({"id": "again", "kind": "button", "goto": "home"}),
        "app spec mini.yaml: screens: goto edges form a cycle home -> cart -> done -> home; "
        "remove one edge or set graph: cyclic",
    ),
    (
        "unknown screen",
        lambda d: d["screens"]["cart"]["widgets"][0].update(goto="pay"),
        "app spec mini.yaml: screens.cart.widgets.pay: goto 'pay' is not a screen (screens: home, cart, done); "
        "fix it or add the screen",
    ),
    (
        "unreachable",
        lambda d: d["screens"].update(orphan={"title": "Orphan", "description": "x"}),
        "app spec mini.yaml: screens.orphan: is unreachable from start 'home'; add a goto to it or remove it",
    ),
    (
        "missing slot in label",
        lambda d: d["screens"]["cart"]["widgets"][0].update(label="Pay {drink}"),
        "app spec mini.yaml: screens.cart.widgets.pay: references slot 'drink', which is not declared; "
        "add it under slots: or fix the name",
    ),
    (
        "empty slot set",
        lambda d: d["slots"].update(dish=[]),
        "app spec mini.yaml: slots.dish: has no values; give at least one value or remove the slot",
    ),
    (
        "unknown start",
        lambda d: d.update(start="main"),
        "app spec mini.yaml: start: 'main' is not a screen (screens: home, cart, done); set start to one of them",
    ),
    (
        "no terminal",
        lambda d: d["screens"]["done"].update(terminal=False),
        "app spec mini.yaml: screens: no screen is terminal, so no task can end; mark at least one screen terminal: true",
    ),
    (
        "toggle arity",
        lambda d: d["slots"].update(wifi=["on", "off", "auto"]),
        "app spec mini.yaml: screens.done.widgets.wifi: toggles slot 'wifi', which needs exactly 2 values (e.g. [on, off])",
    ),
    (
        "list too long",
        lambda d: d["slots"].update(dish=[f"dish {i}" for i in range(301)]),
        "app spec mini.yaml: screens.home.widgets.dishes: lists slot 'dish' as 301 rows; a list holds at most 300",
    ),
    (
        "unknown field",
        lambda d: d["screens"]["home"].update(colour="red"),
        "app spec mini.yaml: screens.home.colour: Extra inputs are not permitted (remove it or check the spelling)",
    ),
    (
        "yaml boolean",
        lambda d: d["slots"].update(wifi=[True, False]),
        "app spec mini.yaml: slots.wifi: True was read as a boolean (YAML reads on/off/yes/no so); quote it",
    ),
]


@pytest.mark.parametrize(("name", "edit", "message"), RULES, ids=[r[0] for r in RULES])
def test_each_rule_has_its_own_message(name: str, edit, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec_with(edit), "mini.yaml")
    assert any(p.startswith(message) for p in info.value.problems), info.value.problems


def test_cyclic_graph_allowed_when_declared() -> None:
    data = spec_with(
        lambda d: d["screens"]["done"]["widgets"].append({"id": "again", "kind": "button", "goto": "home"})
    )
    data["graph"] = "cyclic"
    assert parse_spec(data, "mini.yaml").graph == "cyclic"


def test_all_problems_listed_together() -> None:
    def two(d: dict[str, Any]) -> None:
        d["slots"]["dish"] = []
        d["screens"]["cart"]["widgets"][0]["goto"] = "nowhere"

    with pytest.raises(SpecError) as info:
        parse_spec(spec_with(two), "mini.yaml")
    assert len(info.value.problems) == 2


def test_numbers_become_text(tmp_path: Path) -> None:
    data = spec_with(lambda d: d["slots"].update(dish=[1, 2.5]))
    path = tmp_path / "n.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_spec(path).slots["dish"] == ["1", "2.5"]


def test_unknown_app_reference() -> None:
    with pytest.raises(SpecError, match="no built-in app 'nope' and no such file; built-in apps: ridehail"):
        load_app("nope")


PANTRY = Path(__file__).resolve().parents[2] / "docs/examples/pantry.yaml"


def test_a_key_given_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    text = PANTRY.read_text().replace("  done:\n", "  home:\n    title: Again\n    description: x\n  done:\n")
    spec = tmp_path / "twice.yaml"
    spec.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    line = text.splitlines().index("  home:", text.splitlines().index("  note:")) + 1
    assert str(err.value) == (
        f"app spec {spec}: line {line}: key 'home' appears twice in one mapping; "
        "keep one (YAML would silently use the last)"
    )


def test_the_run_apps_default_to_the_builtins_and_refuse_a_name_defined_twice(tmp_path: Path) -> None:
    assert [a.name for a in load_apps()] == builtin_app_names()
    assert [a.name for a in load_apps([str(PANTRY), "settings", str(PANTRY)])] == ["pantry", "settings"]
    impostor = tmp_path / "takeout.yaml"
    impostor.write_text(PANTRY.read_text().replace("name: pantry", "name: takeout"))
    with pytest.raises(SpecError) as err:
        load_apps([str(impostor), "takeout"])
    assert str(err.value) == (
        f"apps: {impostor} and takeout (built-in) both define app 'takeout' differently; "
        "give one of them another `name:`"
    )
    assert spec_sha256(load_spec(PANTRY)) == spec_sha256(load_app(str(PANTRY)))
    assert spec_sha256(load_spec(PANTRY)) != spec_sha256(load_spec(impostor))


def test_an_intent_that_names_a_control_but_not_its_slot_is_warned() -> None:
    from trajforge.spec_lint import intent_warnings

    def favourite(data: dict) -> None:
        data["slots"]["favourite"] = ["no", "yes"]
        data["screens"]["done"]["widgets"].append(
            {"id": "fav", "kind": "toggle", "slot": "favourite", "label": "收藏"}
        )
        data["screens"]["done"]["intents"] = ["收藏{dish}", "Order {dish}, 收藏 set to {favourite}"]

    spec = parse_spec(spec_with(favourite), "fav.yaml")
    assert intent_warnings(spec) == [
        "screens.done.intents: '收藏{dish}' names '收藏' (screens.done.fav) but not its slot favourite, "
        "so the goal does not check it and a run that never taps it passes; reference {favourite} in the intent"
    ]
    assert intent_warnings(parse_spec(BASE, "mini.yaml")) == []


def test_a_chain_of_thousands_of_screens_validates() -> None:
    """The cycle check walks without recursion: a 3,000-screen chain is a DAG, not a crash."""
    n = 3000
    screens = {
        f"s{i}": {
            "title": f"S{i}",
            "description": "one of many",
            "terminal": i == n - 1,
            "widgets": [{"id": "next", "kind": "button", "label": "Next", "goto": f"s{i + 1}"}]
            if i < n - 1
            else [],
        }
        for i in range(n)
    }
    spec = parse_spec({"name": "chain", "title": "Chain", "start": "s0", "screens": screens}, "chain.yaml")
    assert len(spec.edges()) == n - 1
    screens["s2999"]["widgets"] = [{"id": "back", "kind": "button", "label": "Back", "goto": "s1500"}]
    with pytest.raises(SpecError, match=r"goto edges form a cycle s1500 -> s1501 -> .* -> s2999 -> s1500"):
        parse_spec({"name": "chain", "title": "Chain", "start": "s0", "screens": screens}, "chain.yaml")
