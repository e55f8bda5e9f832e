"""The learned critic's prior: anchored episodes of environments other than the user's, for judging
an app the home has never anchored.

A home's anchors often cover a few apps or tasks. Fitted on those alone, the critic has never
seen, say, a run that ends by tapping the link the task quotes succeed, and on a new task it calls
every such run a failure. The prior (`critics/prior.json.gz`) holds the features and verdicts of
anchored episodes of the tuning half (`bench/halves.py`): 40 MiniWoB++ tasks
(`bench/critic_prior.yaml`) and the built-in apps (a `make run` home), rolled out by the loop
(the random explorer, then the knn policy) and judged by their verifiers; its `sources` name
the homes. `python -m bench.critic_prior HOME...` writes it again, after the features change (a
test fails until it is).

The prior trains only the model for apps the home has not anchored at all (`unseen` in
`critics.learned`), row for row beside the home's own episodes; the shared model and the apps'
own corrections are the home's alone. Fitted into the shared model, the prior cost the built-in
apps' held-out accuracy 1.4 points (docs/critics.md).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from critics.episode_features import FEATURES
from critics.learned import TrainRow

PATH = Path(__file__).with_name("prior.json.gz")


@cache
def prior_rows() -> tuple[TrainRow, ...]:
    """The prior's rows (query None: they train every fold and are never judged)."""
    data: dict[str, Any] = json.loads(gzip.decompress(PATH.read_bytes()))
    if data["features"] != list(FEATURES):
        raise RuntimeError(
            f"{PATH} was written for other critic features; write it again with "
            "`python -m bench.critic_prior HOME...` (docs/critics.md)"
        )
    apps = data["apps"]
    return tuple(TrainRow(None, apps[app], list(x), bool(y)) for app, y, *x in data["rows"])


def with_prior(own: Sequence[TrainRow], leave_out: str | None = None) -> list[TrainRow]:
    """The home's rows and the prior's, without `leave_out`'s (an app measured as never seen)."""
    return [*own, *(r for r in prior_rows() if r.app != leave_out)]


def write(rows: Sequence[TrainRow], sources: Sequence[str]) -> bytes:
    """The prior file's bytes: features named, apps listed once, each row [app index, success, *x]."""
    apps = sorted({r.app for r in rows})
    index = {app: i for i, app in enumerate(apps)}
    body = {
        "features": list(FEATURES),
        "apps": apps,
        "sources": list(sources),
        "rows": [[index[r.app], int(r.success), *(round(v, 4) for v in r.x)] for r in rows],
    }
    return gzip.compress(json.dumps(body, separators=(",", ":")).encode(), mtime=0)
