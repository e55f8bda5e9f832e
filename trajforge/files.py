"""Reading a user's file (a config, an app spec, a suite file): its size bounded and its kind checked
before anything is parsed, every problem one error naming the fix.

`/dev/zero` given as a config once grew the command to 14 GB before the kernel killed it; a folder
or a binary file was a traceback."""

from __future__ import annotations

import stat
from pathlib import Path

from trajforge.errors import ConfigError, TrajforgeError

# The most a config, spec or suite file may hold: the largest built-in app spec is 30 KiB, and a
# suite of a thousand tasks about 1 MiB.
MAX_FILE_BYTES = 8 * 2**20


def read_text(
    path: Path, what: str, error: type[TrajforgeError] = ConfigError, limit: int = MAX_FILE_BYTES
) -> str:
    """The UTF-8 text of `path`, read at most `limit` bytes far (a device or a pipe too).

    Raises:
        `error`: the file is missing, a folder, unreadable, over `limit`, or not UTF-8 text; the
        message names the file as `what` (e.g. "config") and the fix.
    """
    label = f"{what} {path}"
    try:
        if stat.S_ISDIR(path.stat().st_mode):
            raise error(f"{label}: is a directory; give the path of a .yaml file in it")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError as exc:
        raise error(f"{label}: file not found; pass an existing YAML file") from exc
    except OSError as exc:
        raise error(f"{label}: cannot be read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise error(
            f"{label}: over the {limit // 2**20} MiB a {what} file may hold; give the YAML file itself"
        )
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        nul = exc.start if nul < 0 else min(nul, exc.start)
    if nul >= 0:
        raise error(f"{label}: not a text file (byte {nul} is not UTF-8 text); give a YAML {what} file")
    return text
