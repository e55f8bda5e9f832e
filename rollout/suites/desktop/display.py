"""One virtual display: Xvfb, its own session D-Bus and AT-SPI bus, and the processes it runs.

A `Display` is one desktop device: Xvfb with matchbox as its window manager. Xvfb picks a free
display number itself (`-displayfd`), so several displays run side by side on one machine without
a lock of ours. Each display has its
own session bus and accessibility bus, so an element tree read on it holds only its own apps.
Every process it starts (the servers, each app, the tree reader) leads a process group of its
own, killed whole at the end: an app's helpers and dialogs go with it.

Input is xdotool's (`xdotool(...)`); the screenshot is Pillow's X grab of the whole display; the
element tree is read by `atspi_tree.py` under the system Python, which holds Debian's pyatspi.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import shutil
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajforge.errors import ConfigError, DeviceCrashed, DeviceHung

if TYPE_CHECKING:
    from PIL import Image

APT = "apt-get install xvfb xdotool dbus at-spi2-core python3-pyatspi matchbox-window-manager"
# The programs a display needs, and the Debian package of each.
NEEDS = {
    "Xvfb": "xvfb",
    "xdotool": "xdotool",
    "dbus-daemon": "dbus",
    "/usr/libexec/at-spi-bus-launcher": "at-spi2-core",
    "matchbox-window-manager": "matchbox-window-manager",
}
# A window manager that shows one window at a time, filling the display (dialogs centred on it),
# like a phone's screen: every screenshot of an app is the same size, with no decorations.
WINDOW_MANAGER = ["matchbox-window-manager", "-use_titlebar", "no", "-use_cursor", "no"]
ATSPI_BUS = ["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"]
SYSTEM_PYTHON = "/usr/bin/python3"
TREE_READER = Path(__file__).with_name("atspi_tree.py")
START_S = 10.0
XDOTOOL_S = 10.0
TREE_S = 10.0


def missing() -> list[str]:
    """The Debian packages a display needs that this machine lacks (empty: it can run)."""
    out = [pkg for prog, pkg in NEEDS.items() if shutil.which(prog) is None and not Path(prog).exists()]
    probe = [SYSTEM_PYTHON, "-c", "import pyatspi"]
    if not Path(SYSTEM_PYTHON).exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        out.append("python3-pyatspi")
    return out


def require() -> None:
    """Raise ConfigError naming the apt line when a display cannot run here."""
    lacking = missing()
    if lacking:
        raise ConfigError(
            f"desktop suites need {', '.join(lacking)}, not installed here; install them with "
            f"`{APT}` (and the suite's apps, e.g. mousepad galculator gnumeric)"
        )


def _group(argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    """A process leading a group of its own; its output goes nowhere unless `kw` says where (what the
    buses start inherits it, and a pipe nobody reads would stall them)."""
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.DEVNULL)
    return subprocess.Popen(argv, env=env, start_new_session=True, **kw)


def _session(pid: str) -> int | None:
    """The session of a process (`pid` as xdotool prints it), or None: gone, or no pid given."""
    try:
        return os.getsid(int(pid))
    except (ValueError, ProcessLookupError, PermissionError):
        return None


def kill_group(proc: subprocess.Popen[Any], wait_s: float = 2.0) -> None:
    """End a process and everything in its group: TERM, then KILL if it lingers. When the process
    itself has exited (a launcher), what it left in its group is killed."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class Display:
    """A running virtual display of `width` x `height` with its buses; `close()` ends all of it."""

    def __init__(self, width: int, height: int) -> None:
        require()
        self.width, self.height = width, height
        self._procs: list[subprocess.Popen[Any]] = []
        try:
            self.number = self._xvfb()
            self.env = {**os.environ, "DISPLAY": f":{self.number}", "NO_AT_BRIDGE": "0"}
            self.env.pop("WAYLAND_DISPLAY", None)
            self.env["DBUS_SESSION_BUS_ADDRESS"] = self._session_bus()
            self._procs.append(_group(ATSPI_BUS, self.env))
            self._procs.append(_group(WINDOW_MANAGER, self.env))
            self._reader = _group(
                [SYSTEM_PYTHON, str(TREE_READER)],
                self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self._procs.append(self._reader)
        except BaseException:
            self.close()
            raise

    def _xvfb(self) -> int:
        read, write = os.pipe()
        screen = f"{self.width}x{self.height}x24"
        # -noreset: by default the server resets whenever its last client leaves (a short-lived one
        # at startup), and an app that connects during the reset fails with "cannot open display"
        # (5 of 40 fresh displays without it, 0 of 80 with it).
        flags = ["-nolisten", "tcp", "-ac", "-noreset"]
        argv = ["Xvfb", "-displayfd", str(write), "-screen", "0", screen, *flags]
        proc = _group(argv, dict(os.environ), pass_fds=(write,))
        os.close(write)
        self._procs.append(proc)
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()
        if not number.isdigit():
            raise DeviceCrashed(f"Xvfb did not start (exit {proc.poll()})")
        return int(number)

    def _session_bus(self) -> str:
        read, write = os.pipe()  # the address comes on a pipe of its own: what the bus starts writes nowhere
        argv = ["dbus-daemon", "--session", "--nofork", f"--print-address={write}"]
        proc = _group(argv, self.env, pass_fds=(write,))
        os.close(write)
        self._procs.append(proc)
        with os.fdopen(read) as pipe:
            address = pipe.readline().strip()
        if not address:
            raise DeviceCrashed(f"the session D-Bus did not start (exit {proc.poll()})")
        return address

    @property
    def alive(self) -> bool:
        return bool(self._procs) and self._procs[0].poll() is None

    def launch(
        self, argv: list[str], home: Path, stderr: Any = subprocess.DEVNULL
    ) -> subprocess.Popen[bytes]:
        """Start an app on this display with `home` as its HOME and working folder."""
        env = {**self.env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
        env["XDG_DATA_HOME"], env["XDG_CACHE_HOME"] = str(home / ".local/share"), str(home / ".cache")
        try:
            return _group(argv, env, cwd=home, stderr=stderr)
        except FileNotFoundError as exc:
            raise ConfigError(
                f"desktop task: cannot launch {argv[0]!r}: not installed; install it (apt-get install "
                f"{Path(argv[0]).name})"
            ) from exc

    def xdotool(self, *args: str, check: bool = True) -> str:
        """Run one xdotool command line on this display; its output."""
        try:
            done = subprocess.run(
                ["xdotool", *args], env=self.env, capture_output=True, text=True, timeout=XDOTOOL_S
            )
        except subprocess.TimeoutExpired as exc:
            raise DeviceHung(f"xdotool {' '.join(args)} took over {XDOTOOL_S:g} s") from exc
        if check and done.returncode != 0:
            if not self.alive:
                raise DeviceCrashed(f"display :{self.number} died")
            raise DeviceCrashed(f"xdotool {' '.join(args)} failed: {done.stderr.strip()[:200]}")
        return done.stdout

    def windows(self, session: int | None = None) -> list[str]:
        """The visible windows' ids; with `session`, those of the processes of that session: an app
        and what it started (the app a launcher script runs, a helper it forks)."""
        ids = self.xdotool("search", "--onlyvisible", "--name", "", check=False).split()
        if session is None:
            return ids
        return [w for w in ids if _session(self.xdotool("getwindowpid", w, check=False)) == session]

    def grab(self) -> Image.Image:
        """The whole display, as it shows now."""
        from PIL import ImageGrab

        try:
            return ImageGrab.grab(xdisplay=f":{self.number}")
        except OSError as exc:
            raise DeviceCrashed(f"display :{self.number}: no screenshot ({exc})") from exc

    @staticmethod
    def png(frame: Image.Image) -> bytes:
        """A frame `grab` took, as PNG."""
        out = io.BytesIO()
        frame.convert("RGB").save(out, format="PNG", compress_level=1)
        return out.getvalue()

    def tree(self) -> list[dict[str, Any]]:
        """The AT-SPI nodes showing on this display (see atspi_tree.py)."""
        stdin, stdout = self._reader.stdin, self._reader.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(b"tree\n")
            stdin.flush()
        except BrokenPipeError as exc:
            raise DeviceCrashed(f"the element tree reader of :{self.number} died") from exc
        ready, _, _ = select.select([stdout], [], [], TREE_S)
        if not ready:  # an app that stalls the accessibility bus: this reader is not asked again
            kill_group(self._reader)
            raise DeviceHung(f"reading the element tree of :{self.number} took over {TREE_S:g} s")
        line = stdout.readline()
        if not line:
            raise DeviceCrashed(f"the element tree reader of :{self.number} died")
        reply = json.loads(line)
        if "error" in reply:
            raise DeviceCrashed(f"element tree of :{self.number}: {reply['error']}")
        return list(reply["nodes"])

    def close(self) -> None:
        for proc in reversed(self._procs):
            kill_group(proc)
        self._procs.clear()
