"""Whether two runs of the main job ended the same: a refactor's check that behaviour is unchanged.

Run `trajforge evolve` (what `make run` runs) once at the old commit and once at the new one,
each in a git worktree of its own, on the same seed and config, with its output kept:

    git worktree add /tmp/before OLD && cd /tmp/before && \\
        python -c "from flows.cli import main; main()" evolve > /tmp/before.out
    (the same at NEW in /tmp/after)
    python -m bench.same_run /tmp/before /tmp/after /tmp/before.out /tmp/after.out

(`python -c` from the worktree imports the worktree's code, ahead of an editable install.) It
prints, for every dataset version, whether its manifest is the same bytes, every field of
`rounds.json` that differs, and whether the round lines match with their seconds masked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SECONDS = re.compile(r"\[\d+s\]")


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "{run} {run} {run}.out {run}.out"


def differences(old: Any, new: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every leaf where two JSON values differ, by its path."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            yield from differences(old.get(key), new.get(key), f"{path}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from differences(a, b, f"{path}[{i}]")
    elif old != new:
        yield path, old, new


def round_lines(output: Path) -> list[str]:
    """The round lines of `evolve`'s output, seconds masked, less the lines naming the home."""
    return [
        _SECONDS.sub("[…s]", line)
        for line in output.read_text().splitlines()
        if not line.startswith(("evolving to ", "report: "))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the old run's folder (its .trajforge home inside)")
    parser.add_argument("new", type=Path)
    parser.add_argument("old_output", type=Path, help="what the old run printed")
    parser.add_argument("new_output", type=Path)
    args = parser.parse_args()
    homes = [folder / ".trajforge" for folder in (args.old, args.new)]
    manifests = [sorted((home / "objects/datasets").rglob("manifest.json")) for home in homes]
    print(f"manifests: {len(manifests[0])} and {len(manifests[1])}")
    for a, b in zip(*manifests, strict=False):
        same = hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
        print(f"  {a.relative_to(homes[0])}: {'the same bytes' if same else 'DIFFERENT'}")
    old, new = (json.loads((home / "report/rounds.json").read_text()) for home in homes)
    found = list(differences(old, new))
    print(f"rounds.json: {'the same' if not found else f'{len(found)} fields differ'}")
    for path, a, b in found[:40]:
        print(f"  {path}: {a!r} -> {b!r}")
    same = round_lines(args.old_output) == round_lines(args.new_output)
    print(f"round lines (seconds masked): {'the same' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
