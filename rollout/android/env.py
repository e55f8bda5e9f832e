"""`AdbEnv`: an Android emulator or phone driven over adb, as android_world and Mobile-Agent-v3 do.

Screenshots: `exec-out screencap -p`. Element tree: `uiautomator dump`, parsed from XML.
Actions: `input tap / swipe / text`, `keyevent`, the ADB keyboard broadcast for
non-ASCII text (`am broadcast -a ADB_INPUT_TEXT`), `am start -n PACKAGE/ACTIVITY` to open apps
(`monkey -p PACKAGE` when only the package is known).
Verification reads the app's state file (`/sdcard/trajforge_state.json`): the app under
test must export it, as the simulated apps do; other apps need their own verifier.
No emulator runs on our build machines: this backend is tested against a fake adb
(tests/support/fake_adb.py), never yet against a real device.
"""

from __future__ import annotations

import re
import subprocess
import time
import xml.etree.ElementTree as ET
from typing import Any

from storage.keys import sha256_hex
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation, Query
from trajforge.errors import ConfigError, DeviceCrashed, DeviceHung
from trajforge.world.verify import VerifierResult, check_exported_state

KEYCODES = {"back": "KEYCODE_BACK", "home": "KEYCODE_HOME", "enter": "KEYCODE_ENTER", "menu": "KEYCODE_MENU"}
STATE_FILE = "/sdcard/trajforge_state.json"
DUMP_FILE = "/sdcard/window_dump.xml"
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_OFFLINE = ("device offline", "not found", "no devices", "closed", "unauthorized")


def _input_text(text: str) -> str:
    """`input text` takes %s for spaces and needs shell metacharacters escaped."""
    escaped = re.sub(r"([\\\\'\"`$&|;<>()*?!#~])", r"\\\1", text)
    return escaped.replace(" ", "%s")


def parse_ui_dump(xml: str) -> list[dict[str, Any]]:
    """uiautomator's XML to element dicts (id, kind, text, bounds, widget, value, checked)."""
    out: list[dict[str, Any]] = []
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return out
    for i, node in enumerate(root.iter("node")):
        match = _BOUNDS.fullmatch(node.get("bounds", ""))
        if not match:
            continue
        rid = node.get("resource-id", "")
        kind = node.get("class", "").rsplit(".", 1)[-1]
        checkable = node.get("checkable") == "true"
        out.append(
            {
                "id": rid or f"node:{i}",
                "kind": _KINDS.get(kind, kind.lower() or "view"),
                "text": node.get("text") or node.get("content-desc") or "",
                "bounds": [int(g) for g in match.groups()],
                "widget": node.get("trajforge-widget", ""),  # our test apps annotate nodes; elsewhere absent
                "value": node.get("trajforge-value") or None,
                "checked": (node.get("checked") == "true") if checkable else None,
                "clickable": node.get("clickable") == "true",
            }
        )
    return out


_KINDS = {
    "Button": "button",
    "EditText": "input",
    "Switch": "toggle",
    "TextView": "text",
    "CheckedTextView": "list_item",
}


class AdbEnv:
    """One device by serial.

    Args:
        packages: app name -> "package/activity" (or a bare package) for `open_app` and task resets.
        adb: the adb executable (a fake one in tests).
    """

    def __init__(
        self,
        serial: str,
        packages: dict[str, str] | None = None,
        adb: str = "adb",
        store: ObjectStore | None = None,
        timeout_s: float = 20.0,
        settle_s: float = 0.0,
    ) -> None:
        self.serial, self.adb, self.store = serial, adb, store
        self.packages = packages or {}
        self.timeout_s, self.settle_s = timeout_s, settle_s
        self._task: Query | None = None
        self._size: Screen | None = None

    def _run(self, *args: str, binary: bool = False) -> Any:
        cmd = [self.adb, "-s", self.serial, *args]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise DeviceHung(
                f"{self.serial}: adb {' '.join(args[:3])} timed out after {self.timeout_s}s"
            ) from exc
        except FileNotFoundError as exc:
            raise ConfigError(
                f"adb executable {self.adb!r} not found; install platform-tools or set its path"
            ) from exc
        err = done.stderr.decode("utf-8", "replace").strip()
        if done.returncode != 0:
            if any(word in err for word in _OFFLINE):
                raise DeviceCrashed(f"{self.serial}: {err}")
            raise DeviceCrashed(f"{self.serial}: adb {' '.join(args[:3])} failed ({done.returncode}): {err}")
        return done.stdout if binary else done.stdout.decode("utf-8", "replace")

    def _shell(self, *args: str) -> str:
        text: str = self._run("shell", *args)
        return text

    def _screen(self) -> Screen:
        if self._size is None:
            match = re.search(r"(\d+)x(\d+)", self._shell("wm", "size"))
            if not match:
                raise DeviceCrashed(f"{self.serial}: cannot read the screen size")
            self._size = Screen(int(match[1]), int(match[2]))
        return self._size

    # --- protocol ------------------------------------------------------------------------
    def reset(self, task: Query) -> Observation:
        self._task = task
        package = self.packages.get(task.app)
        if package:
            self._shell("am", "force-stop", package.split("/")[0])
        self._shell("input", "keyevent", KEYCODES["home"])
        return self._observe()

    def step(self, action: Action) -> Observation:
        screen, kind = self._screen(), action.kind
        if kind in (ActionKind.CLICK, ActionKind.LONG_PRESS) or (kind == ActionKind.TYPE and action.point):
            x, y = screen.to_px(action.point or (0, 0))
            if kind == ActionKind.LONG_PRESS:
                ms = str(action.duration_ms or 1000)
                self._shell("input", "swipe", str(x), str(y), str(x), str(y), ms)
            else:
                self._shell("input", "tap", str(x), str(y))
        if kind == ActionKind.TYPE:
            text = action.text or ""
            if text.isascii():
                self._shell("input", "text", _input_text(text))
            else:  # ADB Keyboard (com.android.adbkeyboard), as Mobile-Agent does for Chinese
                self._shell("am", "broadcast", "-a", "ADB_INPUT_TEXT", "--es", "msg", text)
        elif kind == ActionKind.SWIPE:
            x1, y1 = screen.to_px(action.point or (500, 500))
            x2, y2 = screen.to_px(action.swipe_end())
            self._shell("input", "swipe", str(x1), str(y1), str(x2), str(y2), str(action.duration_ms or 300))
        elif kind == ActionKind.PRESS:
            self._shell("input", "keyevent", KEYCODES[action.key or "back"])
        elif kind == ActionKind.OPEN_APP:
            target = self.packages.get(action.text or "", action.text or "")
            if "/" in target:  # package/activity: start it directly
                self._shell("am", "start", "-n", target)
            else:  # a bare package: let the launcher intent pick its main activity
                self._shell("monkey", "-p", target, "-c", "android.intent.category.LAUNCHER", "1")
        elif kind == ActionKind.WAIT:
            time.sleep((action.duration_ms or 1000) / 1000)
        if self.settle_s:
            time.sleep(self.settle_s)
        return self._observe()

    def verify(self) -> VerifierResult:
        if self._task is None:
            raise RuntimeError("reset() the environment with a task before verifying")
        return check_exported_state(
            self._task.goal, self._shell("cat", STATE_FILE, "2>/dev/null", "||", "true")
        )

    def close(self) -> None:
        self._task = None

    def _observe(self) -> Observation:
        png: bytes = self._run("exec-out", "screencap", "-p", binary=True)
        if not png.startswith(b"\x89PNG"):
            raise DeviceCrashed(f"{self.serial}: screencap did not return a PNG")
        self._shell("uiautomator", "dump", DUMP_FILE)
        elements = parse_ui_dump(self._run("exec-out", "cat", DUMP_FILE))
        screen = self._screen()
        digest = put_blob(self.store, png)[0] if self.store is not None else sha256_hex(png)
        return Observation(
            screenshot=digest,
            width=screen.width,
            height=screen.height,
            elements=[e for e in elements if e["clickable"] or e["kind"] in ("text", "toggle")],
            meta={"backend": "android", "serial": self.serial},
        )
