"""Where an export is written: a local folder or an s3:// prefix, replaced whole, never mixed.

Every export leaves a marker, `.trajforge-export.json` (dataset, version, format and its files).
A target that holds an earlier export is replaced by the new one as a whole: a local export is
written into a hidden sibling folder, and the old folder is swapped out only once the new one is
complete; an s3:// export is uploaded, then the earlier export's other keys are removed. A target
that holds anything else is refused before anything is written, so an export never mixes two
versions and never deletes files trajforge did not write.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storage.objectstore import S3ObjectStore
from trajforge.errors import ConfigError, StorageError
from trajforge.procs import partial_name, sweep_partials
from trajforge.settings import Settings

MARKER = ".trajforge-export.json"
Finish = Callable[[dict[str, Any]], list[str]]  # the marker's fields -> the files written


def _listed(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()]


# Folders an export never replaces, refused before anything in them is read (`--out /` once walked
# /proc into a traceback, and `--out /usr` read 137k files before refusing).
SYSTEM_FOLDERS = frozenset(
    Path(p) for p in ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/root",
                      "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var")
)  # fmt: skip
SHOWN = 3  # foreign files a refusal names


def _foreign(names: list[str], what: str) -> ConfigError:
    shown = ", ".join(names[:SHOWN]) + (" and more" if len(names) > SHOWN else "")
    return ConfigError(
        f"export target {what} holds files that no trajforge export wrote ({shown}); give a new or "
        "empty folder, or one an earlier export wrote (it is replaced whole)"
    )


def _not_exported(folder: Path) -> list[str]:
    """The first few files in `folder` (at most SHOWN + 1) that the export recorded in its marker did
    not write: the walk stops there, and skips what it cannot read."""
    try:
        written = set(json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"]) | {MARKER}
    except (OSError, ValueError, KeyError, TypeError):
        written = set()
    found: list[str] = []
    for parent, _, files in os.walk(folder):
        for name in files:
            relative = str((Path(parent) / name).relative_to(folder))
            if relative not in written:
                found.append(relative)
                if len(found) > SHOWN:
                    return found
    return found


def _write_marker(root: Path, fields: dict[str, Any]) -> list[str]:
    files = _listed(root)
    (root / MARKER).write_text(json.dumps({**fields, "files": files}, indent=2), encoding="utf-8")
    return files


@contextmanager
def export_target(out: str, settings: Settings | None) -> Iterator[tuple[Path, Finish]]:
    """A local directory to write into, and a finisher that writes the marker and lists the files (see
    the module docstring)."""
    if out.startswith("s3://"):
        with _s3_target(out, settings) as target:
            yield target
    else:
        with _local_target(Path(out)) as target:
            yield target


@contextmanager
def _local_target(final: Path) -> Iterator[tuple[Path, Finish]]:
    if final.resolve() in SYSTEM_FOLDERS:
        raise ConfigError(f"export target {final} is a system folder; give a new folder of your own")
    if final.exists() and not final.is_dir():
        raise ConfigError(f"export target {final} is a file; give a folder path")
    if final.is_dir() and (foreign := _not_exported(final)):
        raise _foreign(foreign, str(final))
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        sweep_partials(final)  # what a killed export of this target left
        tmp = Path(tempfile.mkdtemp(prefix=partial_name(final), dir=final.parent))
    except OSError as exc:
        raise StorageError(
            f"cannot write the export to {final}: {exc.strerror or exc}; give a folder you can write to"
        ) from exc
    try:
        yield tmp, lambda fields: _write_marker(tmp, fields)
        _swap_in(tmp, final)
    except OSError as exc:
        raise StorageError(
            f"writing the export to {final} failed: {exc.strerror or exc}; nothing was left there"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, final: Path) -> None:
    """Put the finished folder in place of `final` (absent, empty or an earlier export): the old one
    moves aside first, so a failure between the two renames leaves one whole export, never a mix."""
    if not final.exists():
        tmp.rename(final)
        return
    aside = Path(tempfile.mkdtemp(prefix=partial_name(final), dir=final.parent))
    aside.rmdir()
    final.rename(aside)
    try:
        tmp.rename(final)
    except OSError:
        aside.rename(final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def _s3_target(out: str, settings: Settings | None) -> Iterator[tuple[Path, Finish]]:
    bucket, _, prefix = out.removeprefix("s3://").partition("/")
    if not bucket or settings is None:
        raise ConfigError(
            f"export target {out!r}: give s3://BUCKET/PREFIX and the S3 settings (TRAJFORGE_S3_*)"
        )
    remote = S3ObjectStore.connect(settings.s3.model_copy(update={"bucket": bucket}))
    base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    before = list(remote.list(base))
    if before and f"{base}{MARKER}" not in before:
        raise _foreign([k.removeprefix(base) for k in before], out)
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-export-"))
    try:

        def upload(fields: dict[str, Any]) -> list[str]:
            files = _write_marker(tmp, fields)
            for name in [*files, MARKER]:  # the marker last: it says the export is whole
                remote.put(f"{base}{name}", (tmp / name).read_bytes())
                (tmp / name).unlink()  # bounded disk as well: each file leaves once it is sent
            stale = set(before) - {f"{base}{name}" for name in [*files, MARKER]}
            for key in sorted(stale):  # the earlier export's files this one does not have
                remote.remove(key)
            return [f"{base}{name}" for name in files]

        yield tmp, upload
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
