"""A fake `adb` for tests: an executable that records every command and answers from a simulated phone.

`FakeAdb(apps)` starts a daemon on 127.0.0.1 holding a `SimDevice`, and writes an `adb`
script that forwards its argv to the daemon. Screenshots are the simulator's frames, the
UI dump is uiautomator-style XML of its element tree, and input commands act on it. Set
`offline = True` to make every command fail as an unplugged device does.
"""

from __future__ import annotations

import base64
import json
import shlex
import stat
import sys
import threading
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rollout.sim.render import FrameRenderer
from trajforge.actions import Action, ActionKind
from trajforge.appspec import AppSpec
from trajforge.world.device import SimDevice

SERIAL = "emulator-5554"
_CLASSES = {
    "button": "android.widget.Button",
    "input": "android.widget.EditText",
    "toggle": "android.widget.Switch",
    "text": "android.widget.TextView",
    "list_item": "android.widget.CheckedTextView",
    "app_icon": "android.widget.TextView",
}
_KEYS = {"KEYCODE_BACK": "back", "KEYCODE_HOME": "home", "KEYCODE_ENTER": "enter", "KEYCODE_MENU": "menu"}


def package_of(app: str) -> str:
    """The built-in apps' component on the fake device."""
    return f"com.trajforge.{app}/.MainActivity"


class FakeAdb:
    def __init__(self, apps: list[AppSpec], directory: Path) -> None:
        self.device = SimDevice(apps)
        self.renderer = FrameRenderer()
        self.commands: list[list[str]] = []
        self.offline = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        self.path = directory / "adb"
        url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self.path.write_text(
            f"#!{sys.executable}\n"
            "import base64, json, sys, urllib.request\n"
            f"req = urllib.request.Request({url!r}, data=json.dumps(sys.argv[1:]).encode())\n"
            "out = json.loads(urllib.request.urlopen(req, timeout=30).read())\n"
            "sys.stdout.buffer.write(base64.b64decode(out['stdout'])); sys.stderr.write(out['stderr'])\n"
            "sys.exit(out['rc'])\n"
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IEXEC)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, argv: list[str]) -> tuple[int, bytes, str]:
        with self._lock:
            self.commands.append(argv)
            if self.offline:
                return 1, b"", "error: device offline"
            if argv[:2] != ["-s", SERIAL]:
                return 1, b"", f"error: device '{argv[1] if len(argv) > 1 else ''}' not found"
            return self._command(argv[2:])

    def _command(self, args: list[str]) -> tuple[int, bytes, str]:
        d = self.device
        if args == ["exec-out", "screencap", "-p"]:
            return 0, self.renderer.frame(d)[0], ""
        if args[:2] == ["exec-out", "cat"]:
            return 0, self._ui_xml().encode(), ""
        if args[:1] != ["shell"]:
            return 1, b"", f"unknown command {shlex.join(args)}"
        cmd = args[1:]
        if cmd == ["wm", "size"]:
            return 0, f"Physical size: {d.size.width}x{d.size.height}\n".encode(), ""
        if cmd[:2] == ["uiautomator", "dump"]:
            return 0, f"UI hierchary dumped to: {cmd[2]}\n".encode(), ""
        if cmd[:2] == ["input", "keyevent"]:
            d.act(Action(kind=ActionKind.PRESS, key=_KEYS[cmd[2]]))
        elif cmd[:2] == ["input", "tap"]:
            d.act(Action(kind=ActionKind.CLICK, point=d.size.from_px(int(cmd[2]), int(cmd[3]))))
        elif cmd[:2] == ["input", "swipe"]:
            start, end = d.size.from_px(int(cmd[2]), int(cmd[3])), d.size.from_px(int(cmd[4]), int(cmd[5]))
            if start == end:
                d.act(Action(kind=ActionKind.LONG_PRESS, point=start, duration_ms=int(cmd[6])))
            else:
                d.act(Action(kind=ActionKind.SWIPE, point=start, to=end))
        elif cmd[:2] == ["input", "text"]:
            d.act(Action(kind=ActionKind.TYPE, text=cmd[2].replace("%s", " ").replace("\\", "")))
        elif cmd[:4] == ["am", "broadcast", "-a", "ADB_INPUT_TEXT"]:
            d.act(Action(kind=ActionKind.TYPE, text=cmd[cmd.index("msg") + 1]))
        elif cmd[:3] == ["am", "start", "-n"]:
            d.open_app(cmd[3].split("/")[0].removeprefix("com.trajforge."))
        elif cmd[:1] == ["monkey"]:
            d.open_app(cmd[cmd.index("-p") + 1].removeprefix("com.trajforge."))
        elif cmd[:2] == ["am", "force-stop"]:
            pass  # the next launch starts on the app's first screen anyway
        elif cmd[:2] == ["cat", "/sdcard/trajforge_state.json"]:
            state = {"app": d.state.app, "screen": d.state.screen, "slots": d.slot_values()}
            return 0, json.dumps(state, ensure_ascii=False).encode(), ""
        else:
            return 1, b"", f"/system/bin/sh: {cmd[0]}: inaccessible or not found"
        return 0, b"", ""

    def _ui_xml(self) -> str:
        nodes = []
        for e in self.device.elements():
            x1, y1, x2, y2 = e.bounds
            attrs = {
                "index": "0",
                "text": e.text,
                "resource-id": e.id,
                "class": _CLASSES.get(e.kind, "android.view.View"),
                "package": f"com.trajforge.{self.device.state.app or 'launcher'}",
                "checkable": "true" if e.checked is not None else "false",
                "checked": "true" if e.checked else "false",
                "clickable": "false" if e.kind == "text" else "true",
                "bounds": f"[{x1},{y1}][{x2},{y2}]",
                "trajforge-widget": e.widget,
                "trajforge-value": e.value or "",
            }
            nodes.append("<node " + " ".join(f'{k}="{escape(v)}"' for k, v in attrs.items()) + " />")
        return (
            "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
            + "".join(nodes)
            + "</hierarchy>"
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                argv = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                rc, out, err = outer.handle(argv)
                body = json.dumps(
                    {"rc": rc, "stdout": base64.b64encode(out).decode(), "stderr": err}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler
