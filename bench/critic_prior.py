"""Write the learned critic's prior (`critics/prior.json.gz`) from evolve homes of the tuning half.

    python -m bench.critic_prior HOME [HOME...]

Every anchored episode of the homes becomes a row: its critic features and the deciding anchor's
verdict. An app of the reporting half (`bench/halves.py`) is refused: a figure measured on it would
no longer be out of sample. The homes used so far are in docs/critics.md.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from bench.bench_critics import _copy
from bench.halves import REPORTING, app_half
from critics.learned import TrainRow
from critics.prior import PATH, write
from critics.trained import anchored_training, seen_episodes
from storage.models import Episode

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "{run} --out {out}/prior.json.gz"


def rows_of(home: Path) -> list[TrainRow]:
    """The anchored episodes of `home` as training rows."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = _copy(home, tmp)
        with sessions() as s:
            up_to = Episode.id.is_not(None)
            return anchored_training(s, seen_episodes(s, up_to), up_to)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("homes", nargs="+", type=Path)
    parser.add_argument(
        "--out", type=Path, default=PATH, help="where the prior goes (default: the shipped one)"
    )
    args = parser.parse_args()
    rows = [r for home in args.homes for r in rows_of(home)]
    reporting = sorted({r.app for r in rows if app_half(r.app) == REPORTING})
    if reporting:
        raise SystemExit(
            f"critic_prior: {', '.join(reporting)} are of the reporting half; leave those homes out"
        )
    args.out.write_bytes(write(rows, [h.absolute().name for h in args.homes]))
    tally = Counter(r.app for r in rows)
    print(f"{args.out}: {len(rows)} episodes ({sum(r.success for r in rows)} successes) of {len(tally)} apps")


if __name__ == "__main__":
    main()
