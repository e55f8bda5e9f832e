"""An offline trajectory critic that learns from the anchors (UI-Genie's reward model, GUI-Critic-R1's
idea, sized for a CPU).

It reads only a `CriticView` (the instruction, screenshots by hash, the element trees as the
device reported them, the actions), turns an episode into observation features, and fits a
ridge-regularised logistic regression on anchored episodes (a verifier's or a human's
verdict). The features (`critics.episode_features`) name no app, widget or task, so a critic
trained on some apps judges others; each feature's weight is held to the side its evidence
points (`SIGNS`).

`cross_judge` gives every episode a verdict from a model that never saw an episode of its query
(k folds by query), so its measured accuracy is out of sample by construction. It calls an episode
a success at `SUCCESS_AT`, above even odds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from critics.episode_features import FEATURES, SIGNS

NAME, VERSION = "learned_trajectory", "2"  # bump with the features or the fit
FOLDS = 5
MIN_TRAIN = 8  # anchored episodes (with both outcomes) before the critic votes at all
RIDGE = 1.0
# the critic's probability at which it calls an episode a success: above even odds, since a false
# success puts a wrong trajectory into the SFT set while a false failure only loses one sample
SUCCESS_AT = 0.7


@dataclass(frozen=True)
class Checkpoint:
    """A fitted critic: standardisation, weights and what it was trained on (stored as JSON)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    trained_on: int
    positives: int

    @property
    def version(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()[:12]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        raw = json.loads(data)
        return cls(
            tuple(raw["features"]),
            tuple(raw["mean"]),
            tuple(raw["scale"]),
            tuple(raw["weights"]),
            float(raw["bias"]),
            int(raw["trained_on"]),
            int(raw["positives"]),
        )

    def prob(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.array(self.mean)) / np.array(self.scale)
        return 1 / (1 + np.exp(-(z @ np.array(self.weights) + self.bias)))


def _newton(z: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """Ridge logistic regression on `z` (last column: the bias, not shrunk) by Newton's method."""
    w = np.zeros(z.shape[1])
    penalty = np.eye(z.shape[1]) * ridge
    penalty[-1, -1] = 0.0
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty @ w
        hess = (z * (p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> Checkpoint | None:
    """Sign-constrained ridge logistic regression (`SIGNS`); None with too few anchors or one outcome.

    Features whose weight would cross its sign are left out one at a time, the worst first, and the
    rest refitted, until every weight is on its side."""
    if len(y) < MIN_TRAIN or y.min() == y.max():
        return None
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    signs = np.array([SIGNS[f] for f in FEATURES] + [0], dtype=float)
    active = list(range(z.shape[1]))
    while True:
        w_active = _newton(z[:, active], y, ridge)
        crossed = signs[active] * w_active
        if crossed.min() >= 0:
            break
        active.pop(int(np.argmin(crossed)))
    w = np.zeros(z.shape[1])
    w[active] = w_active
    return Checkpoint(
        FEATURES,
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in w[:-1]),
        float(w[-1]),
        len(y),
        int(y.sum()),
    )


def fold_of(group: str, folds: int = FOLDS) -> int:
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) % folds


@dataclass(frozen=True)
class Prediction:
    success: bool | None  # None: no model could be fitted without this episode's query
    probability: float | None
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)  # the model that judged

    @property
    def model(self) -> str:
        """The version of the checkpoint that judged it, "" when none could be fitted."""
        return self.checkpoint.version if self.checkpoint is not None else ""


def cross_judge(
    train: Sequence[tuple[str, list[float], bool]],
    targets: Sequence[tuple[str, list[float]]],
    folds: int = FOLDS,
) -> list[Prediction]:
    """Every target (query uid, features) judged by a model fitted on the anchored episodes
    (`train`: query uid, features, success) of the other folds of queries: never its own query."""
    out: list[Prediction | None] = [None] * len(targets)
    for fold in range(folds):
        mine = [i for i, (group, _) in enumerate(targets) if fold_of(group, folds) == fold]
        if not mine:
            continue
        rows = [(x, y) for group, x, y in train if fold_of(group, folds) != fold]
        model = fit(np.array([x for x, _ in rows]), np.array([float(y) for _, y in rows])) if rows else None
        if model is None:
            for i in mine:
                out[i] = Prediction(None, None)
            continue
        probs = model.prob(np.array([targets[i][1] for i in mine]))
        for i, p in zip(mine, probs, strict=True):
            out[i] = Prediction(bool(p >= SUCCESS_AT), float(p), model)
    return [p or Prediction(None, None) for p in out]


def fit_all(train: Sequence[tuple[str, list[float], bool]]) -> Checkpoint | None:
    """The checkpoint of a round: fitted on every anchored episode so far."""
    if not train:
        return None
    return fit(np.array([x for _, x, _ in train]), np.array([float(y) for _, _, y in train]))
