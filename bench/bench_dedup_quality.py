"""Trajectory-dedup quality on a labelled near-duplicate set built from the simulator.

For each generated query, the ground-truth path is played on a fault-free device (the
base trajectory) and again with one variation that keeps it the same trajectory:

- pop-ups: dialogs cover screens on entry and are dismissed;
- scroll offsets: lists are scrolled away and back before acting;
- list contents: the app's lists show other items around the chosen one (a feed that
  changed between visits).

Those pairs are labelled duplicates. Pairs of base trajectories of two different
queries of the same app whose routes visit different screens are labelled distinct. Each
method embeds every frame, averages a trajectory's frames (leaving out those a dismissed
dialog covered, `curation.overlays`, as dedup does), and calls a pair a duplicate when the
cosine exceeds the threshold (AgentCPM-GUI §3.4). Each method is scored at its own default
threshold, at the threshold chosen on a tuning set built the same way from other queries
(`--tune-seed`), and at the labelled set's own best (an upper bound, not a result).
Methods:

- the engine's screen encoder (`curation.encoder`, the default `resnet` featuriser),
  trained here as `trajforge curate train-encoder` trains it, on the screenshots of
  OTHER queries (another seed) played with occasional pop-ups: no labelled pair and no
  screenshot of the labelled set is seen in training;
- ResNet-50 with RANDOM weights (no pretrained weights can be downloaded here);
- our `thumb` and `phash` fallbacks, and imagededup's PHash (its hashing module,
  unmodified) as ±1 vectors on the same pairs.

It prints training time and throughput (views/s through forward and backward) on the
CPU, and on CUDA too when a GPU is present.

Usage: python -m bench.bench_dedup_quality [--queries 6 --train-steps 200 --seed 3 --tune-seed 5]
       [--encoder-seeds 0,1,2] [--threshold T] [--write-pairs DIR] [--no-resnet50]
`--encoder-seeds` trains one encoder per seed on the same screenshots: the spread of training.
`--write-pairs DIR` also writes the labelled set as screenshots and DIR/pairs.jsonl, the file
`trajforge curate dedup-eval --pairs` reads, so another featuriser or threshold can be measured
on the same pairs without simulating them again.
Needs `pip install --no-deps imagededup==0.3.3.post2` and `pip install -e '.[bench]'`
(`make bench` does both); imagededup's CNN module needs torchvision, which has no CPU
build here, so only its hashing module is loaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import itertools
import pathlib
import sys
import tempfile
import types
from collections.abc import Callable
from functools import partial

import numpy as np
from PIL import Image
from transformers import ResNetConfig

from bench.common import table, timed
from curation.dedup_eval import Pair, choose, score, similarities, write_pairs
from curation.encoder import EncoderSpec, train_encoder, write_checkpoint
from querygen.pipeline import generate_queries
from rollout.sim.env import SimEnv
from trajforge.actions import Action, ActionKind
from trajforge.appspec import AppSpec, builtin_app_names, load_app
from trajforge.domain import Query
from trajforge.features import PHashFeaturizer, ResNetFeaturizer, ThumbFeaturizer, _normalise
from trajforge.world.model import POPUP_CLOSE, FaultConfig, Move
from trajforge.world.oracle import actions_for

Frames = list[bytes]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--queries 1 --train-queries 1 --train-steps 2 --no-resnet50"


def _dismiss(env: SimEnv, frames: Frames) -> None:
    while env.device.state.popup:
        close = next(e for e in env.device.elements() if e.id == POPUP_CLOSE)
        env.step(Action(kind=ActionKind.CLICK, point=env.device.size.from_px(*close.center)))
        frames.append(env.last_frame)


def play(
    query: Query, apps: list[AppSpec], faults: FaultConfig | None = None, wiggle: bool = False
) -> Frames:
    env = SimEnv(apps, faults=faults)
    env.reset(query)
    frames = [env.last_frame]
    _dismiss(env, frames)
    for action in actions_for(env.device, query.app, [Move.from_json(m) for m in query.path]):
        if wiggle and action.kind == ActionKind.CLICK and env.device.state.scroll == 0:
            for direction in ("up", "down"):  # scroll away and back: offsets, same route
                env.step(Action(kind=ActionKind.SWIPE, point=(500, 600), direction=direction))
                frames.append(env.last_frame)
        env.step(action)
        frames.append(env.last_frame)
        _dismiss(env, frames)
    return frames


def changed_lists(spec: AppSpec, query: Query) -> AppSpec:
    """The app with every list showing other items around the ones the path picks."""
    chosen = {m.get("value") for m in query.path}
    slots = {
        name: [v for v in values if v in chosen] + [f"{v} (new)" for v in values if v not in chosen][::-1]
        for name, values in spec.slots.items()
    }
    return spec.model_copy(update={"slots": slots})


def labelled_set(per_app: int, seed: int = 3) -> tuple[dict[str, Frames], list[tuple[str, str, bool, str]]]:
    apps = [load_app(n) for n in builtin_app_names()]
    trajs: dict[str, Frames] = {}
    pairs: list[tuple[str, str, bool, str]] = []
    for spec in apps:
        queries = list(generate_queries(spec, per_app, seed=seed).kept)
        for i, q in enumerate(queries):
            base = f"{q.uid}:base"
            trajs[base] = play(q, apps)
            variants = {
                "popups": play(q, apps, FaultConfig(popup_rate=0.35, seed=i)),
                "scroll": play(q, apps, wiggle=True),
                "lists": play(q, [changed_lists(spec, q) if a.name == spec.name else a for a in apps]),
            }
            for kind, frames in variants.items():
                trajs[f"{q.uid}:{kind}"] = frames
                pairs.append((base, f"{q.uid}:{kind}", True, kind))
        for a, b in itertools.combinations(queries, 2):
            if [m["screen"] for m in a.path] != [m["screen"] for m in b.path]:  # another route
                pairs.append((f"{a.uid}:base", f"{b.uid}:base", False, "other route"))
    return trajs, pairs


def training_screens(per_app: int, seed: int = 11) -> Frames:
    """Distinct screenshots of other queries' routes, some under pop-ups: what a farm records."""
    apps = [load_app(n) for n in builtin_app_names()]
    screens: dict[bytes, None] = {}
    for spec in apps:
        for i, q in enumerate(generate_queries(spec, per_app, seed=seed).kept):
            screens.update(dict.fromkeys(play(q, apps, FaultConfig(popup_rate=0.1, seed=i))))
    return list(screens)


def trained_encoder(
    screens: Frames, steps: int, device: str, seed: int = 0, full: bool = False
) -> tuple[ResNetFeaturizer, str]:
    """The default encoder trained on `screens`, loaded the way dedup loads it; and its training line.
    `full`: every step `steps` allows (the budget before it was sized to the data)."""
    spec = EncoderSpec(steps=steps, seed=seed, epochs=1e9 if full else EncoderSpec.epochs)
    model, report, bar = train_encoder(screens, spec, device=device, threads=2 if device == "cpu" else 0)
    with tempfile.TemporaryDirectory() as folder:
        write_checkpoint(model, spec, report, bar, pathlib.Path(folder))
        return ResNetFeaturizer.load(folder), report.render()


def imagededup_phash() -> Callable[[Frames], np.ndarray]:
    """imagededup's PHash.encode_image, without importing its CNN (torchvision) package inits."""
    spec = importlib.util.find_spec("imagededup")
    if spec is None or spec.origin is None:
        raise SystemExit("imagededup is missing: pip install --no-deps imagededup==0.3.3.post2")
    root = pathlib.Path(spec.origin).parent
    for name in ("imagededup", "imagededup.methods", "imagededup.utils"):
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = module
    from imagededup.methods.hashing import PHash

    phash = PHash(verbose=False)

    def embed(images: Frames) -> np.ndarray:
        rows = []
        for png in images:
            arr = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
            bits = bin(int(phash.encode_image(image_array=arr), 16))[2:].zfill(64)
            rows.append([1.0 if b == "1" else -1.0 for b in bits])
        return _normalise(np.array(rows, dtype=np.float32))

    return embed


def as_pairs(trajs: dict[str, Frames], pairs: list[tuple[str, str, bool, str]]) -> list[Pair]:
    return [Pair(tuple(trajs[a]), tuple(trajs[b]), dup, kind) for a, b, dup, kind in pairs]


Method = tuple[Callable[[Frames], np.ndarray], float, bool]  # embed, own threshold, skip overlays


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=6, help="queries per app")
    parser.add_argument(
        "--threshold", type=float, default=None, help="one threshold for all (default: each method's own)"
    )
    parser.add_argument("--train-queries", type=int, default=30, help="queries per app to train on")
    parser.add_argument(
        "--train-steps", type=int, default=EncoderSpec.steps, help="training cap (curate.encoder_steps)"
    )
    parser.add_argument(
        "--encoder-seeds", default="0", help="train one encoder per seed, comma-separated: the spread"
    )
    parser.add_argument("--seed", type=int, default=3, help="the labelled set's query seed")
    parser.add_argument("--tune-seed", type=int, default=5, help="the tuning set's query seed")
    parser.add_argument("--write-pairs", type=pathlib.Path, help="also write the labelled set here")
    parser.add_argument("--no-resnet50", action="store_true", help="leave out ResNet-50 (slow on a CPU)")
    return parser.parse_args()


def _methods(args: argparse.Namespace) -> dict[str, Method]:
    """Our trained encoder (one per seed), then the baselines."""
    import torch

    screens = training_screens(args.train_queries)
    encoders = {}
    for seed in (int(s) for s in args.encoder_seeds.split(",")):
        encoders[seed], trained = trained_encoder(screens, args.train_steps, "cpu", seed)
        print(f"training on CPU (2 threads), seed {seed}: {trained}")
    first, encoder = next(iter(encoders.items()))
    full, trained = trained_encoder(screens, args.train_steps, "cpu", first, full=True)
    print(f"training on CPU (2 threads), seed {first}, the full budget: {trained}")
    if torch.cuda.is_available():
        print(f"training on CUDA: {trained_encoder(screens, args.train_steps, 'cuda')[1]}")
    resnet50: dict[str, Method] = {}
    if not args.no_resnet50:
        resnet = ResNetFeaturizer.random(ResNetConfig(), batch_size=32)  # ResNet-50 shape, random weights
        resnet50["resnet-50 (random init)"] = (resnet.embed, resnet.threshold, True)
    return {
        f"resnet (trained, ours), seed {first}": (encoder.embed, encoder.threshold, True),
        "  same, dialog frames kept": (encoder.embed, encoder.threshold, False),
        f"  same, seed {first}, {args.train_steps} steps (unsized)": (full.embed, full.threshold, True),
        **{f"  same, seed {seed}": (e.embed, e.threshold, True) for seed, e in list(encoders.items())[1:]},
        **resnet50,
        "thumb (ours)": (ThumbFeaturizer().embed, ThumbFeaturizer.threshold, True),
        "phash (ours)": (PHashFeaturizer().embed, PHashFeaturizer.threshold, True),
        "imagededup PHash": (imagededup_phash(), 0.97, False),
    }


def _row(
    name: str, method: Method, labelled: list[Pair], tuning: list[Pair], threshold: float | None
) -> list[str]:
    """One method at its own (or the given) threshold, at the tuning set's, and at its best."""
    embed, own, skip = method
    labels = [p.duplicate for p in labelled]
    sims, seconds = timed(partial(similarities, embed, labelled, skip))
    threshold = own if threshold is None else threshold
    at = score(sims, labels, threshold)
    tuned = choose(similarities(embed, tuning, skip), [p.duplicate for p in tuning])
    on_test = score(sims, labels, tuned.threshold)
    best = choose(sims, labels)
    per_kind = []
    for kind in sorted({p.kind for p in labelled}):
        idx = [i for i, p in enumerate(labelled) if p.kind == kind]
        per_kind.append(f"{kind} {sum(sims[i] > threshold for i in idx)}/{len(idx)}")
    return [
        name,
        f"{threshold}: P {at.precision:.2f} R {at.recall:.2f} F1 {at.f1:.2f}",
        f"{tuned.threshold:.3f}: P {on_test.precision:.2f} R {on_test.recall:.2f}",
        f"{best.threshold:.3f}: P {best.precision:.2f} R {best.recall:.2f}",
        "; ".join(per_kind),
        f"{seconds:.1f}",
    ]


def main() -> None:
    args = _arguments()
    methods = _methods(args)
    trajs, pairs = labelled_set(args.queries, args.seed)
    labels = [dup for _, _, dup, _ in pairs]
    kinds = sorted({k for *_, k in pairs})
    print(
        f"labelled set (seed {args.seed}): {len(trajs)} trajectories, {sum(labels)} duplicate pairs "
        f"({', '.join(kinds)}), {len(labels) - sum(labels)} distinct pairs"
    )
    labelled = as_pairs(trajs, pairs)
    tuning = as_pairs(*labelled_set(args.queries, args.tune_seed))
    print(f"tuning set (seed {args.tune_seed}): {len(tuning)} pairs, built the same way\n")
    if args.write_pairs:
        print(f"labelled set written to {write_pairs(labelled, args.write_pairs)}\n")
    rows = [_row(name, method, labelled, tuning, args.threshold) for name, method in methods.items()]
    columns = [
        "method",
        "default threshold",
        "threshold from tuning set",
        "labelled set's own best F1",
        "flagged at default, per pair kind",
        "embed+score s",
    ]
    print(table("trajectory dedup quality on the labelled set (flagged = called duplicate)", columns, rows))


if __name__ == "__main__":
    main()
