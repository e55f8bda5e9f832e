"""The desktop backend on real apps: Xvfb, matchbox, AT-SPI, galculator, mousepad and gnumeric.

Each task is solved by actions chosen from the element tree as the device reports it (no hidden
state), checked by the task's own evaluator; a wrong ending fails it. Resets are clean, and closing
a device leaves no process behind.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rollout.suites import get_suite, task_query
from rollout.suites.desktop import DesktopSuite
from rollout.suites.desktop import env as desktop_env
from rollout.suites.desktop.env import DesktopEnv, xdotool_args
from tests.conftest import service_missing
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation
from trajforge.errors import ConfigError, DeviceCrashed

K = ActionKind
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite() -> DesktopSuite:
    found = get_suite("desktop")
    assert isinstance(found, DesktopSuite)
    lacking = found.missing()
    if lacking:
        service_missing(f"desktop suites need {', '.join(lacking)} (apt-get install {' '.join(lacking)})")
    return found


@pytest.fixture
def env(suite: DesktopSuite) -> Iterator[DesktopEnv]:
    device = suite.environment(None)
    yield device
    device.close()


def start(env: DesktopEnv, task: str, seed: int = 3) -> tuple[Observation, dict[str, str]]:
    instruction, params = env.describe(task, seed)
    return env.reset(task_query(f"desktop:{task}", seed, instruction, params)), params


def at(env: DesktopEnv, obs: Observation, text: str, kind: str | None = None) -> tuple[int, int]:
    """The centre of the first element showing `text` (of `kind`), as a 0-1000 point."""
    for e in obs.elements or []:
        if e["text"] == text and kind in (None, e["kind"]):
            x1, y1, x2, y2 = e["bounds"]
            return env.screen.from_px((x1 + x2) / 2, (y1 + y2) / 2)
    raise AssertionError(f"no {text!r} on screen: {[e['text'][:20] for e in obs.elements or []]}")


def click(env: DesktopEnv, obs: Observation, text: str, kind: str | None = None) -> Observation:
    return env.step(Action(kind=K.CLICK, point=at(env, obs, text, kind)))


def test_the_calculator_is_solved_by_clicks_on_its_element_tree(env: DesktopEnv) -> None:
    obs, params = start(env, "calc-add")
    assert obs.width == 1024 and obs.height == 768 and obs.meta["backend"] == "desktop"
    for key in (params["a"], "+", params["b"], "="):
        obs = click(env, obs, key, "button")
    assert env.verify().success
    display = next(e for e in obs.elements or [] if e["tag"] == "text")
    assert float(display["text"]) == int(params["a"]) + int(params["b"])
    obs, params = start(env, "calc-add", seed=4)  # the same device, reset: a fresh calculator
    obs = click(env, obs, params["a"], "button")
    outcome = env.verify()
    assert not outcome.success and outcome.failed == "check_failed" and params["a"] in outcome.detail


def test_the_editor_saves_through_its_menu_and_each_reset_is_a_fresh_home(env: DesktopEnv) -> None:
    obs, params = start(env, "editor-write-word")
    home, first_app = env._home, env._apps[0]
    obs = env.step(Action(kind=K.TYPE, text=params["word"]))
    obs = click(env, obs, "File")
    obs = click(env, obs, "Save")
    assert env.verify().success
    assert home is not None and (home / "notes.txt").read_text().strip() == params["word"]
    obs, params = start(env, "editor-replace-text")
    assert not home.exists() and first_app.poll() is not None  # the last episode's home and app are gone
    obs = env.step(Action(kind=K.HOTKEY, text="ctrl+a"))
    obs = env.step(Action(kind=K.TYPE, text=params["word"]))
    obs = env.step(Action(kind=K.HOTKEY, text="ctrl+s"))
    assert env.verify().success


def test_the_spreadsheet_cell_is_checked_in_the_saved_file(env: DesktopEnv) -> None:
    obs, params = start(env, "sheet-set-cell")
    obs = click(env, obs, "A1", "input")  # the name box: go to the task's cell
    for action in (
        Action(kind=K.HOTKEY, text="ctrl+a"),
        Action(kind=K.TYPE, text=params["cell"]),
        Action(kind=K.PRESS, key="enter"),
        Action(kind=K.TYPE, text=params["n"]),
        Action(kind=K.PRESS, key="enter"),
    ):
        obs = env.step(action)
    assert not env.verify().success  # typed but not saved
    obs = click(env, obs, "Save", "button")
    assert env.verify().success


def test_a_display_per_device_and_nothing_left_after_close(suite: DesktopSuite) -> None:
    devices = [suite.environment(None) for _ in range(2)]
    try:
        shown = [start(device, "calc-enter-digit")[0] for device in devices]
        numbers = {o.meta["display"] for o in shown}
        assert len(numbers) == 2
        pids = [p.pid for d in devices for p in d._display._procs + d._apps]  # type: ignore[union-attr]
    finally:
        for device in devices:
            device.close()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"process {pid} outlived its display"
    for number in numbers:
        assert not Path(f"/tmp/.X{number}-lock").exists()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


TALLY = Path(__file__).resolve().parents[1] / "support" / "desktop_tally.py"


@contextmanager
def user_task(path: Path, task: str, seed: int) -> Iterator[tuple[DesktopEnv, Observation, dict[str, str]]]:
    """A task of a user's suite file, reset on a display of its own (closed after): the environment,
    the first observation and the seed's params."""
    user = get_suite(str(path))
    assert isinstance(user, DesktopSuite)
    env = user.environment(None)
    try:
        instruction, params = env.describe(task, seed)
        yield env, env.reset(task_query(f"{path}:{task}", seed, instruction, params)), params
    finally:
        env.close()


def tally_suite(folder: Path) -> Path:
    """A suite for an app of the user's own, written from docs/environments.md alone; its app is
    started through a shell, so its window belongs to a child of the launched process."""
    path = folder / "tally.yaml"
    path.write_text(
        "name: tally\n"
        "display: [800, 600]\n"
        "end_on_success: true\n"
        "desktop:\n"
        "  add-item:\n"
        "    instruction: 'Add \"{item}\" to the tally and save it.'\n"
        "    params: {item: [pear, plum, fig]}\n"
        "    setup:\n"
        f"      - launch: [sh, -c, '/usr/bin/python3 {TALLY}; true']\n"
        "    check:\n"
        "      - get: {file: tally.txt}\n"
        "        contains: '{item}'\n"
    )
    return path


def test_a_users_own_app_from_a_suite_file_through_a_launcher(suite: DesktopSuite, tmp_path: Path) -> None:
    user = get_suite(str(tally_suite(tmp_path)))
    assert isinstance(user, DesktopSuite)
    env = user.environment(None)
    try:
        instruction, params = env.describe("add-item", 1)
        obs = env.reset(task_query(f"{tally_suite(tmp_path)}:add-item", 1, instruction, params))
        assert obs.width == 800 and obs.height == 600
        field = at(env, obs, "", "input")
        obs = env.step(Action(kind=K.TYPE, point=field, text=params["item"]))
        obs = click(env, obs, "Add", "button")
        assert not obs.done
        obs = click(env, obs, "Save", "button")
        assert obs.done and env.verify().success  # its checks held: the episode ended itself
    finally:
        env.close()


def test_setup_types_lines_waits_and_the_getters_read_the_window_and_node_they_name(
    suite: DesktopSuite, tmp_path: Path
) -> None:
    """docs/environments.md's setup steps and getters on a real editor: `type:` keeps its newlines,
    `wait:` waits, `window_title` reads the named app's window, `element` the focused node; a
    policy's `type` ending in a newline presses Return too."""
    path = tmp_path / "lines.yaml"
    path.write_text(
        "name: lines\nmax_steps: 9\ndesktop:\n  two-lines:\n    instruction: Add a third line and save.\n"
        "    max_steps: 4\n    setup:\n      - write: {path: notes.txt, text: ''}\n"
        '      - launch: [mousepad, notes.txt]\n      - type: "first\\nsecond\\n"\n      - wait: 0.3\n'
        "    check:\n      - get: {window_title: {launch: mousepad}}\n        contains: notes.txt\n"
        "      - get: {element: {role: text, focused: true}}\n        regex: '^first\\nsecond\\nthird'\n"
        "      - get: {file: notes.txt}\n        regex: '^first\\nsecond\\nthird\\n'\n"
    )
    with user_task(path, "two-lines", 0) as (env, _, _):
        assert env.max_steps == 4  # the task's own, over the suite's 9
        before = env.verify()
        assert not before.success and "check 2" in before.detail  # typed, saved nothing yet
        env.step(Action(kind=K.TYPE, text="third\n"))
        env.step(Action(kind=K.HOTKEY, text="ctrl+s"))
        assert env.verify().success, env.verify().detail


def test_libreoffice_calc_a_large_tree_read_in_bounds_and_its_saved_cell_checked(tmp_path: Path) -> None:
    """An app the built-in suite does not use, with an element tree of millions of cells: the
    reader keeps to what shows, a cell reads "A1: 73", and the check reads the saved workbook."""
    import shutil

    if shutil.which("localc") is None:
        service_missing("LibreOffice Calc is missing (apt-get install libreoffice-calc libreoffice-gtk3)")
    path = tmp_path / "office.yaml"
    path.write_text(
        "name: office\n"
        "desktop:\n"
        "  cell:\n"
        "    instruction: 'Type {n} into cell A1 and save the workbook.'\n"
        "    params: {n: {from: 10, to: 99}}\n"
        "    setup:\n"
        "      - write: {path: data.csv, text: 'x'}\n"
        "      - run: [ssconvert, data.csv, data.xlsx]\n"
        "      - launch: [localc, --norestore, --nologo, data.xlsx]\n"
        "    check:\n"
        "      - get: {cell: {file: data.xlsx, ref: A1}}\n"
        "        numeric: '{n}'\n"
    )
    with user_task(path, "cell", 2) as (env, obs, params):
        # under a loaded CI, Calc can register its menus after reset's wait ends: wait for them, with
        # steps to spare for the four the task needs
        for _ in range((env.max_steps or 15) - 5):
            if any(e["kind"] == "button" and e["text"] == "File" for e in obs.elements or []):
                break
            obs = env.step(Action(kind=K.WAIT, duration_ms=1000))
        cells = [e for e in obs.elements or [] if e["tag"] == "table cell"]
        assert any(e["kind"] == "button" and e["text"] == "File" for e in obs.elements or [])
        assert 0 < len(cells) < 500 and cells[0]["text"] == "A1: x"
        obs = env.step(Action(kind=K.TYPE, text=params["n"]))
        obs = env.step(Action(kind=K.PRESS, key="enter"))
        assert f"A1: {params['n']}" in [e["text"] for e in obs.elements or []]
        assert not env.verify().success  # not saved yet
        env.step(Action(kind=K.HOTKEY, text="ctrl+s"))
        env.step(Action(kind=K.PRESS, key="enter"))  # "Use Excel 2007-365!" keeps the format
        deadline = time.monotonic() + 10  # the save may still be writing the file
        while not env.verify().success and time.monotonic() < deadline:
            time.sleep(0.2)
        assert env.verify().success


def test_an_app_that_fails_is_named_with_what_it_said_and_a_launchers_app_ends_with_its_episode(
    tmp_path: Path,
) -> None:
    path = tmp_path / "apps.yaml"
    path.write_text(
        "name: apps\ndesktop:\n"
        "  broken:\n    instruction: Wait.\n    setup:\n      - launch: [sh, -c, 'echo bad flag >&2; exit 2']\n"
        "    check:\n      - get: {exists: x}\n        exact: 'true'\n"
        "  detached:\n    instruction: Wait.\n"
        f"    setup:\n      - launch: [sh, -c, '/usr/bin/python3 {TALLY} & exit 0']\n"
        "    check:\n      - get: {exists: x}\n        exact: 'true'\n"
    )
    user = get_suite(str(path))
    assert isinstance(user, DesktopSuite)
    env = user.environment(None)
    try:
        with pytest.raises(DeviceCrashed, match="sh exited \\(2\\) before showing a window: bad flag"):
            env.reset(task_query(f"{path}:broken", 0, "Wait.", {}))
        # a launcher that exits 0 leaves its app to show the window; the episode's end ends the app
        obs = env.reset(task_query(f"{path}:detached", 0, "Wait.", {}))
        assert any(e["text"] == "Add" for e in obs.elements or [])
        (launcher,) = env._apps
        assert launcher.poll() == 0
        env.reset(task_query(f"{path}:detached", 1, "Wait.", {}))  # the next episode, on the same display
        left = subprocess.run(
            ["pgrep", "-g", str(launcher.pid)], capture_output=True, text=True
        ).stdout.split()
        assert all(_zombie(int(pid)) for pid in left), f"the app {launcher.pid} launched outlived its episode"
    finally:
        env.close()


@pytest.mark.parametrize(
    ("run", "said"),
    [
        ("[no-such-program-xyz]", "'no-such-program-xyz' is not installed"),
        ("[sh, -c, 'echo disk full >&2; exit 3']", "exited 3: disk full; fix the step"),
        ("[sleep, '30']", "did not exit within 1 s"),
    ],
)
def test_a_setup_command_that_fails_is_one_configuration_error(
    suite: DesktopSuite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str, said: str
) -> None:
    monkeypatch.setattr(desktop_env, "RUN_S", 1.0)
    path = tmp_path / "broken.yaml"
    path.write_text(
        "name: broken\ndesktop:\n  t:\n    instruction: Do it.\n"
        f"    setup:\n      - run: {run}\n    check:\n      - get: {{exists: x}}\n        exact: 'true'\n"
    )
    user = get_suite(str(path))
    assert isinstance(user, DesktopSuite)
    env = user.environment(None)
    try:
        with pytest.raises(ConfigError, match="desktop task 't': setup `run: ") as caught:
            env.reset(task_query(f"{path}:t", 0, "Do it.", {}))
        assert said in str(caught.value)
    finally:
        env.close()


def test_desktop_actions_are_xdotool_commands() -> None:
    screen = Screen(1001, 1001)
    assert xdotool_args(Action(kind=K.DOUBLE_CLICK, point=(10, 20)), screen) == [
        "mousemove", "10", "20", "click", "--repeat", "2", "1",
    ]  # fmt: skip
    assert xdotool_args(Action(kind=K.SCROLL, direction="down", amount=3), screen) == [
        "click",
        "--repeat",
        "3",
        "5",
    ]
    assert xdotool_args(Action(kind=K.HOTKEY, text="ctrl+pagedown"), screen) == ["key", "ctrl+Next"]
    assert xdotool_args(Action(kind=K.TYPE, text="-n"), screen) == ["type", "--delay", "2", "--", "-n"]
    assert xdotool_args(Action(kind=K.PRESS, key="back"), screen) == ["sleep", "0"]
