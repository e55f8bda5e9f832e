"""Desktop task files without a display: parsing, parameters, checks and the element form."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rollout.suites import get_suite, resolve
from rollout.suites.desktop import DesktopSuite
from rollout.suites.desktop.display import APT, missing
from rollout.suites.desktop.env import elements
from rollout.suites.desktop.tasks import arithmetic, fill, meets, read_cell
from trajforge.actions import Screen
from trajforge.errors import ConfigError

SUITE = """\
name: office
display: [800, 600]
desktop:
  note:
    instruction: "Write {word} in notes.txt"
    params: {word: [alpha, beta], n: {from: 1, to: 3}}
    setup: [{write: {path: notes.txt, text: ""}}, {launch: [mousepad, notes.txt]}]
    check: [{get: {file: notes.txt}, contains: "{word}"}]
"""


def test_builtin_suite_has_fifteen_tasks_over_three_apps() -> None:
    suite = get_suite("desktop")
    assert isinstance(suite, DesktopSuite) and len(suite.desktop) >= 15
    launched = {s.launch[0] for t in suite.desktop.values() for s in t.setup if s.launch}
    assert launched == {"galculator", "mousepad", "gnumeric"}
    for name, task in suite.desktop.items():  # every template fills from its own params, every seed
        for seed in range(5):
            params = task.instance(name, seed)
            fill(task.instruction, params)
            for check in task.check:
                fill(check.metric()[1], params)
    assert resolve("desktop:calc-add")[0] == "desktop:calc-add"


def test_a_suite_file_is_a_desktop_suite_with_seeded_params(tmp_path: Path) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(SUITE)
    suite = get_suite(str(path))
    assert isinstance(suite, DesktopSuite) and suite.display == (800, 600)
    task = suite.task("note")
    assert task.instance("note", 7) == task.instance("note", 7)
    assert {task.instance("note", s)["word"] for s in range(20)} == {"alpha", "beta"}
    assert {task.instance("note", s)["n"] for s in range(40)} == {"1", "2", "3"}
    env = suite.environment(None)
    instruction, params = env.describe("note", 7)
    assert instruction == f"Write {params['word']} in notes.txt"
    with pytest.raises(ConfigError, match="has no task 'other'; its tasks: note"):
        suite.check_task("other")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (SUITE.replace("{launch: [mousepad, notes.txt]}", "{launch: [a], run: [b]}"), "exactly one of write"),
        (SUITE.replace("contains:", "equals:"), "equals"),
        (SUITE.replace(', contains: "{word}"', ""), "exactly one metric"),
        (SUITE.replace("file: notes.txt}", "file: notes.txt, exists: x}"), "exactly one of file"),
        ("name: office\ndesktop: {}\n", "desktop"),
        (
            SUITE.replace("{get: {file: notes.txt}", "{get: {window_title: {launch: gedit}}"),
            "names 'gedit', which no",
        ),
        (
            SUITE.replace("{write: {path", "{wait: 90}, {write: {path"),
            "wait: Input should be less than or equal",
        ),
        (SUITE.replace("display: [800, 600]", "max_steps: 0"), "max_steps: Input should be greater"),
    ],
)
def test_a_bad_suite_file_is_one_error_naming_the_place(tmp_path: Path, body: str, problem: str) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=rf"desktop suite {path}: .*{problem}.*fix it"):
        get_suite(str(path))


def test_max_steps_wait_and_the_named_getters_as_a_suite_file_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(
        SUITE.replace("display: [800, 600]", "display: [800, 600]\nmax_steps: 12")
        .replace("{launch: [mousepad, notes.txt]}", "{launch: [/usr/bin/mousepad, notes.txt]}, {wait: 0.5}")
        .replace(
            "check: [",
            "max_steps: 4\n    check: [{get: {window_title: {launch: mousepad}}, contains: notes}, ",
        )
        + '  other:\n    instruction: Type\n    setup: [{type: "one\\ntwo"}]\n'
        "    check: [{get: {element: {role: text, focused: true, index: -1}}, exact: two}]\n"
    )
    suite = get_suite(str(path))
    assert isinstance(suite, DesktopSuite) and suite.max_steps == 12
    note, other = suite.task("note"), suite.task("other")
    assert note.max_steps == 4 and other.max_steps is None and note.setup[2].wait == 0.5
    assert other.setup[0].type == "one\ntwo"  # the newline kept: typed as a press of Return
    element = other.check[0].get.element
    assert element is not None and element.focused and element.index == -1
    env = suite.environment(None)
    assert env.max_steps == 12  # no task yet: the suite's; a task's own wins once it is reset


def test_a_missing_home_template_and_an_unknown_param_are_named(tmp_path: Path) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(SUITE.replace("display:", "home: template/\ndisplay:"))
    with pytest.raises(ConfigError, match="home template is not a folder"):
        get_suite(str(path))
    with pytest.raises(ConfigError, match="names 'colour', which is not one of its params \\(word\\)"):
        fill("a {colour} car", {"word": "x"})


@pytest.mark.parametrize("home", ["../../../../../../../../../etc", "/etc", "../outside"])
def test_a_home_outside_the_suites_folder_is_refused_unless_opted_in(tmp_path: Path, home: str) -> None:
    """Before: `home: ../../../../etc` was a raw shutil.Error, and an absolute folder outside was
    copied into every episode."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "suites").mkdir()
    path = tmp_path / "suites" / "office.yaml"
    path.write_text(SUITE.replace("display:", f"home: {home}\ndisplay:"))
    with pytest.raises(
        ConfigError, match=rf"home {re.escape(home)} is outside the suite's folder.*local_files: any"
    ):
        get_suite(str(path))
    path.write_text(SUITE.replace("display:", f"home: {home}\nlocal_files: any\ndisplay:"))
    assert get_suite(str(path)).home == (path.parent / home).resolve()  # type: ignore[attr-defined]


def test_checks_are_metrics_never_eval() -> None:
    assert arithmetic("12 + 7 * 2") == 26 and arithmetic("9 ** 0.5") == 3 and arithmetic("-(4 / 2)") == -2
    with pytest.raises(ConfigError, match="only numbers"):
        arithmetic("__import__('os')")
    assert meets("numeric", " 1,234 ", "1000 + 234", 1e-6) and not meets("numeric", "abc", "1", 1e-6)
    assert meets("exact", "river\n", "river", 0) and not meets("exact", "rivers", "river", 0)
    assert meets("contains", "a river b", "river", 0) and meets("regex", "red\nstar", r"^red\n", 0)


def test_a_cell_of_a_saved_csv(tmp_path: Path) -> None:
    sheet = tmp_path / "s.csv"
    sheet.write_text("item,qty\napple,3\npear,5\n")
    assert read_cell(sheet, "B3") == "5" and read_cell(sheet, "A2") == "apple"
    assert read_cell(sheet, "D9") is None and read_cell(tmp_path / "none.csv", "A1") is None
    with pytest.raises(ConfigError, match="not a cell reference; write it like B2"):
        read_cell(sheet, "B")


def test_the_element_tree_in_trajforge_form() -> None:
    nodes: list[dict[str, Any]] = [
        {"role": "frame", "name": "Calc", "text": None, "bounds": [0, 0, 800, 600], "states": []},
        {
            "role": "push button",
            "name": "Save",
            "text": None,
            "bounds": [4, 26, 41, 61],
            "states": ["enabled"],
        },
        {"role": "push button", "name": "", "text": None, "bounds": [50, 26, 80, 61], "states": []},
        {
            "role": "text",
            "name": "",
            "text": "42",
            "bounds": [7, 32, 900, 84],
            "states": ["editable", "focused"],
        },
        {"role": "check box", "name": "Bold", "text": None, "bounds": [1, 1, 9, 9], "states": ["checked"]},
        {"role": "label", "name": "Sum = 8", "text": "Sum = 8", "bounds": [0, 590, 90, 610], "states": []},
        {"role": "menu item", "name": "Quit", "text": None, "bounds": [-5, -5, -4, -4], "states": []},
    ]
    out = elements(nodes, Screen(800, 600))
    assert [(e["kind"], e["text"]) for e in out] == [
        ("button", "Save"),
        ("input", "42"),
        ("toggle", "Bold"),
        ("text", "Sum = 8"),
    ]
    assert out[1]["bounds"] == [7, 32, 800, 84] and out[1]["focused"] and out[2]["checked"] is True


def test_what_a_display_needs_is_named_with_the_apt_line() -> None:
    assert set(missing()) <= {
        "xvfb",
        "xdotool",
        "dbus",
        "at-spi2-core",
        "matchbox-window-manager",
        "python3-pyatspi",
    }
    assert APT.startswith("apt-get install xvfb")


def test_check_names_what_a_desktop_run_lacks_with_its_apt_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from flows.cli_ops import _check_suites
    from rollout.suites.desktop import display

    monkeypatch.setattr(display, "missing", lambda: ["xvfb"])
    monkeypatch.setattr(
        "rollout.suites.desktop.spec.shutil.which", lambda p: None if p == "ssconvert" else "/usr/bin/x"
    )
    with pytest.raises(typer.Exit) as stopped:
        _check_suites(["desktop:calc-add", "takeout", "miniwob:click-button"])
    assert stopped.value.exit_code == 1
    assert "desktops: missing gnumeric, xvfb; apt-get install gnumeric xvfb" in capsys.readouterr().err
    monkeypatch.setattr(display, "missing", lambda: [])
    monkeypatch.setattr("rollout.suites.desktop.spec.shutil.which", lambda p: "/usr/bin/x")
    _check_suites(["desktop:calc-add"])
    assert "desktops: desktop: ok" in capsys.readouterr().out


def test_a_tree_reader_that_hangs_is_a_hung_device_and_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    from rollout.suites.desktop import display as module
    from trajforge.errors import DeviceCrashed, DeviceHung

    monkeypatch.setattr(module, "TREE_S", 0.2)
    stuck = module.Display.__new__(module.Display)  # no X needed: only its reader is asked
    stuck.number = 0
    stuck._reader = subprocess.Popen(
        ["sleep", "30"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    with pytest.raises(DeviceHung, match=r"took over 0\.2 s"):
        stuck.tree()
    assert stuck._reader.poll() is not None
    with pytest.raises(DeviceCrashed, match="reader of :0 died"):
        stuck.tree()
