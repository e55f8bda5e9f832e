"""One desktop device: a virtual display, an episode's apps on it, and its task checks.

Reset is a fresh home folder (a copy of the suite's template, or empty), the task's setup run in
it, and the last episode's apps killed with their whole process group: no VM, nothing of one
episode seen by the next. Actions are xdotool input at display pixels (`xdotool_args`): clicks,
double and right clicks, hovering, drags and the wheel as a mouse does them; a long press holds the
left button, a swipe with an end point drags and one with a direction turns the wheel (a finger
moving up shows what is further down); typing goes to the focused window (after a click on the
`point` it carries), hotkeys press their keys together. Back, home and app launches do nothing on
a desktop (the episode records them; a desktop has none).

An observation is the whole display and the AT-SPI tree in trajforge's element form. The app
quitting ends the episode (`done`), and so does the task's checks holding after a step when the
suite says `end_on_success` (as MiniWoB++'s pages end their own episodes); the display dying is a
device crash, retried elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout.suites.base import seed_of
from rollout.suites.desktop.display import Display, kill_group
from rollout.suites.desktop.tasks import Check, DesktopTask, WindowRef, fill, meets, read_cell
from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.actions.compare import on_screen
from trajforge.actions.model import OPPOSITE, WHEEL_CLICKS
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError, DeviceCrashed
from trajforge.world.verify import VerifierResult

if TYPE_CHECKING:
    from rollout.suites.desktop.spec import SuiteSpec

# (button, clicks) of each click kind; the wheel's buttons by the way the view moves
CLICKS = {
    ActionKind.CLICK: ("1", 1),
    ActionKind.DOUBLE_CLICK: ("1", 2),
    ActionKind.RIGHT_CLICK: ("3", 1),
}
WHEEL = {"up": "4", "down": "5", "left": "6", "right": "7"}
SWIPE_WHEEL_CLICKS = 5
# pyautogui's key names (the canonical hotkey's) as X keysyms, where they differ
KEYSYMS = {
    "enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape", "tab": "Tab",
    "backspace": "BackSpace", "delete": "Delete", "del": "Delete", "up": "Up", "down": "Down",
    "left": "Left", "right": "Right", "home": "Home", "end": "End", "pageup": "Prior",
    "pagedown": "Next", "space": "space", "win": "super", "cmd": "super", "command": "super",
    "insert": "Insert", **{f"f{i}": f"F{i}" for i in range(1, 13)},
}  # fmt: skip
WINDOW_S = 20.0
RUN_S = 60.0  # a setup `run:` command must exit within this
SETTLE_S = 1.0
READY_S, READY_GAP_S, READY_EMPTY_S = 5.0, 0.25, 1.5  # the element tree's wait at reset (_ready_tree)
INPUT_ROLES = {"text", "entry", "password text", "spin button", "terminal", "document text"}
TOGGLE_ROLES = {"check box", "radio button", "check menu item", "radio menu item"}
BUTTON_ROLES = {
    "push button", "toggle button", "menu", "menu item", "page tab", "link", "combo box",
    "list item", "table cell", "tree item", "icon", "table column header",
}  # fmt: skip
TEXT_ROLES = {"label", "heading", "paragraph", "static", "caption", "text"}


def type_lines(display: Display, text: str) -> None:
    """Type `text` into the focused window, each newline a press of Return (xdotool's `type` would
    drop it)."""
    for i, line in enumerate(text.split("\n")):
        if i:
            display.xdotool("key", "Return")
        if line:
            display.xdotool("type", "--delay", "2", "--", line)


def elements(nodes: list[dict[str, Any]], screen: Screen) -> list[dict[str, Any]]:
    """AT-SPI nodes as trajforge elements: fields, toggles, named controls and visible text."""
    out: list[dict[str, Any]] = []
    for i, node in enumerate(nodes):
        role, name, text = node["role"], node["name"].strip(), (node.get("text") or "").strip()
        states, bounds = set(node.get("states", ())), node.get("bounds")
        if not bounds:
            continue
        if role in INPUT_ROLES and "editable" in states:
            kind, shown = "input", text
        elif role in TOGGLE_ROLES:
            kind, shown = "toggle", name
        elif role == "table cell" and (name or text):  # a sheet's cell: its address and content, "A1: 73"
            kind, shown = "button", ": ".join(dict.fromkeys(t for t in (name, text) if t))
        elif role in BUTTON_ROLES and (name or text):
            kind, shown = "button", name or text
        elif role in TEXT_ROLES and (text or name):
            kind, shown = "text", text or name
        else:
            continue
        box = on_screen([int(v) for v in bounds], screen)
        if box[2] <= box[0] or box[3] <= box[1]:
            continue
        out.append(
            {
                "id": f"n{i}",
                "kind": kind,
                "tag": role,
                "text": shown,
                "checked": "checked" in states if kind == "toggle" else None,
                "focused": "focused" in states,
                "bounds": box,
            }
        )
    return out


def xdotool_args(action: Action, screen: Screen) -> list[str]:
    """One xdotool command line doing `action` at display pixels (`sleep 0`: nothing to do)."""
    kind = action.kind

    def at(point: tuple[int, int] | None) -> list[str]:
        return ["mousemove", *map(str, screen.to_px(point))] if point is not None else []

    here = at(action.point)
    if kind in CLICKS:
        button, repeat = CLICKS[kind]
        return [*here, "click", "--repeat", str(repeat), button]
    if kind == ActionKind.LONG_PRESS:
        return [*here, "mousedown", "1", "sleep", f"{(action.duration_ms or 800) / 1000:g}", "mouseup", "1"]
    if kind == ActionKind.HOVER:
        return here
    if kind == ActionKind.DRAG or (kind == ActionKind.SWIPE and action.to is not None):
        return [*here, "mousedown", "1", *at(action.to), "mouseup", "1"]
    if kind in (ActionKind.SWIPE, ActionKind.SCROLL):  # a finger moving up shows what is further down
        view = OPPOSITE[action.swipe_direction()] if kind == ActionKind.SWIPE else action.direction
        clicks = action.amount or (WHEEL_CLICKS if kind == ActionKind.SCROLL else SWIPE_WHEEL_CLICKS)
        return [*here, "click", "--repeat", str(clicks), WHEEL[view or "down"]]
    if kind == ActionKind.TYPE:
        return [*([*here, "click", "1"] if here else []), "type", "--delay", "2", "--", action.text or ""]
    if kind == ActionKind.PRESS and action.key == "enter":
        return ["key", "Return"]
    if kind == ActionKind.HOTKEY:
        return ["key", "+".join(KEYSYMS.get(k, k) for k in (action.text or "").split("+"))]
    return ["sleep", "0"]  # wait, answer, terminate; back, home and app launches (a desktop has none)


class DesktopEnv:
    """One device slot's display (started on its first episode) and the current episode's apps."""

    def __init__(self, suite: SuiteSpec, store: ObjectStore | None) -> None:
        self.suite, self.store = suite, store
        self.screen = Screen(*suite.display)
        self._display: Display | None = None
        self._apps: list[subprocess.Popen[bytes]] = []
        self._programs: dict[int, str] = {}  # a launched app's pid -> the program's name it was started as
        self._home: Path | None = None
        self._task: tuple[str, DesktopTask, dict[str, str]] | None = None
        self._last: Observation | None = None

    def describe(self, task: str, seed: int) -> tuple[str, dict[str, str]]:
        spec = self.suite.task(task)
        params = spec.instance(task, seed)
        return fill(spec.instruction, params), params

    # --- the episode ------------------------------------------------------------------------------
    def reset(self, task: Query) -> Observation:
        name, seed = seed_of(task)
        spec = self.suite.task(name)
        params = spec.instance(name, seed)
        self._end_episode()
        display = self._device()
        self._home = home = Path(tempfile.mkdtemp(prefix="trajforge-desktop-")) / "home"
        if self.suite.home is not None:
            shutil.copytree(self.suite.home, home)
        home.mkdir(parents=True, exist_ok=True)
        self._task = (name, spec, params)
        for step in spec.setup:
            if step.write is not None:
                target = self._path(fill(step.write.path, params))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(fill(step.write.text, params), encoding="utf-8")
            elif step.run is not None:
                self._run(name, [fill(a, params) for a in step.run])
            elif step.launch is not None:
                self._launch([fill(a, params) for a in step.launch])
            elif step.type is not None:
                type_lines(display, fill(step.type, params))
            elif step.key is not None:
                display.xdotool("key", *fill(step.key, params).split())
            elif step.wait is not None:
                time.sleep(step.wait)
        return self._observe(settle=True, tree=self._ready_tree(display))

    @property
    def max_steps(self) -> int | None:
        """The most steps the current task's episode takes, where the task or its suite says."""
        return (self._task[1].max_steps if self._task else None) or self.suite.max_steps

    def _run(self, task: str, argv: list[str]) -> None:
        """A setup `run:` step: the command must exit 0 within RUN_S; anything else is the task's
        configuration, named with the command's last output."""
        display, home = self._device(), self._home
        assert home is not None
        where = f"desktop task {task!r}: setup `run: {argv}`"
        try:
            done = subprocess.run(
                argv, cwd=home, env={**display.env, "HOME": str(home)}, capture_output=True, timeout=RUN_S
            )
        except FileNotFoundError as exc:
            raise ConfigError(f"{where}: {argv[0]!r} is not installed; install it or fix the step") from exc
        except subprocess.TimeoutExpired as exc:
            raise ConfigError(
                f"{where} did not exit within {RUN_S:g} s; a setup command must finish (start an app "
                "with `launch:`)"
            ) from exc
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise ConfigError(f"{where} exited {done.returncode}: {said[0][:200]}; fix the step")

    def _launch(self, argv: list[str]) -> None:
        """Start an app and wait for its window (a launcher that exits 0 leaves its app to show one in
        its session); an app that fails first is named with what it said on stderr."""
        display, home = self._device(), self._home
        assert home is not None
        with tempfile.TemporaryFile() as said:
            proc = display.launch(argv, home, stderr=said)
            self._apps.append(proc)
            self._programs[proc.pid] = Path(argv[0]).name
            self._await_window(argv, proc, said)

    def _await_window(self, argv: list[str], proc: subprocess.Popen[bytes], said: Any) -> None:
        display = self._device()
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline:
            found = display.windows(proc.pid)
            if found:
                display.xdotool("windowfocus", found[-1], check=False)
                return
            if proc.poll():  # exit 0 is a launcher's: its app may still show a window in its session
                said.seek(0)
                last = " | ".join(said.read().decode("utf-8", errors="replace").strip().splitlines()[-2:])
                raise DeviceCrashed(
                    f"{argv[0]} exited ({proc.returncode}) before showing a window: {last or 'nothing'}"
                )
            time.sleep(0.05)
        raise DeviceCrashed(f"{argv[0]} showed no window within {WINDOW_S:g} s")

    def step(self, action: Action) -> Observation:
        display = self._device()
        if self._last is not None and self._last.done:
            return self._last
        if action.kind == ActionKind.TYPE and "\n" in (action.text or ""):  # UI-TARS's "submit with \n"
            display.xdotool(*xdotool_args(action.model_copy(update={"text": ""}), self.screen))
            type_lines(display, action.text or "")
        else:
            display.xdotool(*xdotool_args(action, self.screen))
        if action.kind == ActionKind.WAIT:
            time.sleep(min(action.duration_ms or 1000, 5000) / 1000)
        return self._observe(settle=True, checked=self.suite.end_on_success)

    def verify(self) -> VerifierResult:
        if self._task is None:
            raise RuntimeError("reset() the environment with a task first")
        _, spec, params = self._task
        for i, check in enumerate(spec.check):
            metric, expected = check.metric()
            got = self._get(check, params)
            if got is None or not meets(metric, got, fill(expected, params), check.tolerance):
                shown = "nothing" if got is None else repr(got[:120])
                return VerifierResult(
                    False, "check_failed", f"check {i + 1} ({metric}): got {shown}", 0.0, at_end=True
                )
        return VerifierResult(True, None, f"{len(spec.check)} check(s) met", 1.0, at_end=True)

    def _get(self, check: Check, params: dict[str, str]) -> str | None:
        get = check.get
        if get.file is not None:
            path = self._path(fill(get.file, params))
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        if get.exists is not None:
            return str(self._path(fill(get.exists, params)).exists()).lower()
        if get.cell is not None:
            return read_cell(self._path(fill(get.cell.file, params)), fill(get.cell.ref, params))
        display = self._device()
        if get.window_title:
            named = get.window_title.launch if isinstance(get.window_title, WindowRef) else None
            apps = [
                app for app in self._apps if named is None or self._programs.get(app.pid) == Path(named).name
            ]
            windows = [w for app in apps for w in display.windows(app.pid)]
            return display.xdotool("getwindowname", windows[-1]).strip() if windows else None
        ref = get.element
        assert ref is not None
        nodes = [
            node
            for node in display.tree()
            if node["role"] == ref.role
            and ref.name in (None, node["name"])
            and (not ref.focused or "focused" in node.get("states", ()))
        ]
        if not -len(nodes) <= ref.index < len(nodes):
            return None
        node = nodes[ref.index]
        return str(node.get("text") if node.get("text") is not None else node["name"])

    # --- helpers ---------------------------------------------------------------------------------
    def _path(self, relative: str) -> Path:
        assert self._home is not None
        path = (self._home / relative).resolve()
        if not path.is_relative_to(self._home.resolve()):
            raise ConfigError(
                f"desktop task: path {relative!r} leaves the episode's home; use a relative path"
            )
        return path

    def _device(self) -> Display:
        if self._display is None:
            self._display = Display(self.screen.width, self.screen.height)
        if not self._display.alive:
            raise DeviceCrashed(f"display :{self._display.number} died")
        return self._display

    def _ready_tree(self, display: Display) -> list[dict[str, Any]]:
        """The element tree once the apps stop adding to it: an app registers its accessible objects
        after its window shows (LibreOffice takes seconds). Two reads READY_GAP_S apart that agree
        end the wait, an empty tree only after it stayed empty READY_EMPTY_S; at most READY_S."""
        nodes, since = display.tree(), time.monotonic()
        deadline = since + READY_S
        while time.monotonic() < deadline:
            time.sleep(READY_GAP_S)
            again = display.tree()
            if len(again) != len(nodes):
                nodes, since = again, time.monotonic()
            elif nodes or time.monotonic() - since >= READY_EMPTY_S:
                break
        return nodes

    def _observe(
        self, settle: bool = False, checked: bool = False, tree: list[dict[str, Any]] | None = None
    ) -> Observation:
        display = self._device()
        frame = display.grab()
        if settle:  # the frame after an action: wait until two grabs in a row agree
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                time.sleep(0.05)
                again = display.grab()
                if again.tobytes() == frame.tobytes():
                    break
                frame = again
        png = display.png(frame)
        quit_app = next((app for app in self._apps if app.poll() is not None), None)
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        meta: dict[str, Any] = {"backend": "desktop", "suite": self.suite.name, "display": display.number}
        if quit_app is not None:
            meta["app_exited"] = quit_app.returncode
        solved = checked and quit_app is None and self.verify().success
        self._last = Observation(
            screenshot=digest,
            width=self.screen.width,
            height=self.screen.height,
            elements=elements(display.tree() if tree is None else tree, self.screen),
            meta=meta,
            done=quit_app is not None or solved,
        )
        return self._last

    def _end_episode(self) -> None:
        for app in self._apps:
            kill_group(app)
        self._apps.clear()
        self._programs.clear()
        if self._home is not None:
            shutil.rmtree(self._home.parent, ignore_errors=True)
            self._home = None
        self._last = None

    def close(self) -> None:
        try:
            self._end_episode()
        finally:
            if self._display is not None:
                self._display.close()
                self._display = None
