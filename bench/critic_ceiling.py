"""How far the learned critic's features carry to an app they were never fitted on, whatever the fit.

    python -m bench.critic_ceiling [--apps N]

Every app of the shipped prior (`critics/prior.json.gz`: 40 MiniWoB++ tasks and the 4 built-in
apps, all of the tuning half) is judged by a model fitted on the other 43 apps' anchored episodes
alone, as the learned critic judges an app the home never anchored (`unseen`). Three fits of the
same features, side by side:

- `shipped`: the sign-constrained ridge logistic regression (`critics.learned.fit`), the baseline;
- `boosted trees`: gradient-boosted trees (scikit-learn, `make bench` installs it), each feature
  held monotone in the direction `SIGNS` gives it, so interactions the linear fit cannot draw
  are there to be found;
- `app-centred`: each feature beside itself less its mean over the app's own episodes (no verdict
  needed: a judge sees every episode of the round), so what is usual on an app weighs less than
  what sets an episode apart from the others of its app.

Then the apps where most of the shipped fit's errors lie: an app's errors mostly all go one way
(every success missed, or every failure called a success), so the features, not the fit, set the
ceiling. All figures are in-sample to the design: these apps are the ones it was chosen on.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from critics.episode_features import SIGNS
from critics.learned import SUCCESS_AT, fit
from critics.prior import prior_rows
from trajforge.metrics import ChannelStats, rate_text

Fitter = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (x, y, x to judge) -> probability


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--apps 3"


def _linear(x: np.ndarray, y: np.ndarray, judged: np.ndarray, signs: dict[str, int] = SIGNS) -> np.ndarray:
    model = fit(x, y, signs=signs)
    assert model is not None  # 43 apps of both outcomes
    return model.prob(judged)


def _boosted(x: np.ndarray, y: np.ndarray, judged: np.ndarray) -> np.ndarray:
    from sklearn.ensemble import HistGradientBoostingClassifier

    trees = HistGradientBoostingClassifier(
        max_depth=3, learning_rate=0.1, max_iter=100, monotonic_cst=list(SIGNS.values()), random_state=0
    )
    return np.asarray(trees.fit(x, y).predict_proba(judged)[:, 1])


def app_centred(x: np.ndarray, apps: np.ndarray) -> np.ndarray:
    """Each row's features, then the same less their mean over its app's rows."""
    centred = x.copy()
    for app in np.unique(apps):
        mine = apps == app
        centred[mine] -= x[mine].mean(axis=0)
    return np.hstack([x, centred])


def leave_each_app_out(x: np.ndarray, y: np.ndarray, apps: np.ndarray, fitter: Fitter) -> np.ndarray:
    """Each app's episodes called success or failure by a model fitted on the other apps only."""
    said = np.zeros(len(y), dtype=bool)
    for app in np.unique(apps):
        mine = apps == app
        said[mine] = fitter(x[~mine], y[~mine], x[mine]) >= SUCCESS_AT
    return said


def _stats(said: np.ndarray, y: np.ndarray) -> ChannelStats:
    st = ChannelStats()
    for predicted, actual in zip(said, y, strict=True):
        st.add(bool(predicted), bool(actual))
    return st


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=0, help="only the first N apps by name (0: all)")
    args = parser.parse_args()
    rows = list(prior_rows())
    if args.apps:
        rows = [r for r in rows if r.app in sorted({r.app for r in rows})[: args.apps]]
    x = np.array([r.x for r in rows])
    y = np.array([float(r.success) for r in rows])
    apps = np.array([r.app for r in rows])
    centred_signs = SIGNS | {f"{name}-app_mean": sign for name, sign in SIGNS.items()}
    variants: dict[str, tuple[np.ndarray, Fitter]] = {
        "shipped": (x, _linear),
        "boosted trees": (x, _boosted),
        "app-centred": (app_centred(x, apps), lambda a, b, c: _linear(a, b, c, centred_signs)),
    }
    print(f"{len(y)} anchored episodes of {len(set(apps))} tuning apps, each app left out in turn")
    print(f"{'fit':16} {'accuracy':>9} {'precision':>10} {'recall':>8}")
    said_by = {}
    for name, (features, fitter) in variants.items():
        said_by[name] = said = leave_each_app_out(features, y, apps, fitter)
        s = _stats(said, y).summary()
        print(f"{name:16} {s['accuracy']:>9.1%} {rate_text(s, 'precision'):>10} {rate_text(s, 'recall'):>8}")
    said = said_by["shipped"]
    errors = {app: _stats(said[apps == app], y[apps == app]) for app in np.unique(apps)}
    worst = sorted(errors.items(), key=lambda kv: -(kv[1].fp + kv[1].fn))
    total = sum(st.fp + st.fn for st in errors.values())
    one_way = sum(max(st.fp, st.fn) for st in errors.values())
    share = one_way / max(total, 1)
    print(f"\nshipped: {total} errors; {one_way} ({share:.0%}) go the way most of their app's go")
    print(f"{'app':32} {'n':>4} {'successes':>9} {'missed':>7} {'false':>6}")
    for app, st in worst[:12]:
        print(f"{app:32} {st.n:>4} {st.tp + st.fn:>9} {st.fn:>7} {st.fp:>6}")


if __name__ == "__main__":
    main()
