"""How the learned critic's design was chosen: its parts, measured on homes of four tuning apps.

    python -m bench.critic_tuning HOME [HOME...]

The anchored episodes of the homes (the prior's homes: `bench/critic_prior.yaml` and a `make run`
home) are cut into homes of four apps, in the order of their names' hash. Each small home is
judged with the other apps as its prior: held-out queries (5 folds by query, as the loop
judges) and leave one app out (fitted without any episode of the app, the prior's included).
Each line is one variant of the critic, so the parts' worth is read side by side:

- `v3`: as shipped (each app's own correction, the prior for apps the home never anchored);
- `no prior`: the corrections alone;
- `no corrections`: the prior alone;
- `v2`: neither.

Every app here is of the tuning half: these are the figures the design was chosen on, not a
report of how it does on apps nobody looked at (that is `bench.bench_critics` on the reporting
half, docs/critics.md).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import critics.learned as learned
from bench.critic_prior import rows_of
from critics.learned import SUCCESS_AT, TrainRow, cross_judge, fit_all
from trajforge.metrics import ChannelStats, rate_text

GROUP = 4


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "{run}"


@contextmanager
def _no_corrections(off: bool) -> Iterator[None]:
    """The corrections shrunk to nothing (ridge 1e9) while `off`."""
    ridge = learned.CORRECTION_RIDGE
    learned.CORRECTION_RIDGE = 1e9 if off else ridge
    try:
        yield
    finally:
        learned.CORRECTION_RIDGE = ridge


def _as_prior(rows: Sequence[TrainRow]) -> list[TrainRow]:
    return [TrainRow(None, r.app, r.x, r.success) for r in rows]


def measure(rows: Sequence[TrainRow], prior: bool, corrections: bool) -> tuple[ChannelStats, ChannelStats]:
    """(held-out queries, leave one app out) pooled over the homes of `GROUP` apps."""
    apps = sorted({r.app for r in rows}, key=lambda a: hashlib.sha256(a.encode()).hexdigest())
    held, left_out = ChannelStats(), ChannelStats()
    with _no_corrections(not corrections):
        for start in range(0, len(apps), GROUP):
            group = set(apps[start : start + GROUP])
            home = [r for r in rows if r.app in group]
            others = _as_prior([r for r in rows if r.app not in group]) if prior else []
            targets = [(r.query or "", r.app, r.x) for r in home]
            for r, p in zip(home, cross_judge(home + others, targets), strict=True):
                held.add(bool(p.success), r.success)
            for app in sorted(group):
                model = fit_all([r for r in home + others if r.app != app])
                mine = [r for r in home if r.app == app]
                probs = model.prob(np.array([r.x for r in mine]), app) if model else np.zeros(len(mine))
                for r, p in zip(mine, probs, strict=True):
                    left_out.add(bool(p >= SUCCESS_AT), r.success)
    return held, left_out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("homes", nargs="+", type=Path)
    rows = [r for home in parser.parse_args().homes for r in rows_of(home)]
    print(f"{len(rows)} anchored episodes of {len({r.app for r in rows})} apps, in homes of {GROUP} apps")
    print(f"{'critic':16} {'held-out queries':>30} {'leave one app out':>30}")
    for name, prior, corrections in (
        ("v3", True, True),
        ("no prior", False, True),
        ("no corrections", True, False),
        ("v2", False, False),
    ):
        figures = []
        for st in measure(rows, prior, corrections):
            s = st.summary()
            figures.append(f"{s['accuracy']:.1%} (precision {rate_text(s, 'precision')})")
        print(f"{name:16} {figures[0]:>30} {figures[1]:>30}")


if __name__ == "__main__":
    main()
