"""The loop's evidence in one run: three configurations side by side from the same seed.

`python -m bench.bench_loop [--rounds 6] [--out DIR] [HOME...]` runs `trajforge evolve` in a
fresh home per configuration, one after the other, with the same seed and apps:

- default: critics, verifier and dedup filter what is published;
- unfiltered: `evolve.filtering: false`, every sample published (the ablation);
- verifier-free: `critics.outcome: critic`, the calibrated critics decide every outcome
  (the verifier only calibrates them), as on a farm whose apps have no verifier.

It prints each configuration's two success curves from `rounds.json`, per app: the round's own
policy on its new queries, and the same policy on the fixed held-out set (`evolve.heldout`,
with the promotion gate's decisions), the revisited queries' pass rate before and after guidance,
and the checks of issue 19's targets; it writes `loop.png` (the three curves, overall and per
app) and `loop.json` under `--out`. With HOMEs (`default=PATH` ...) it reads finished homes
instead of running.

`--miniwob` runs the loop on ten MiniWoB++ tasks instead (`docs/examples/miniwob10.yaml`, in
Chromium; `--miniwob-home DIR` reads a finished home): held-out success by MiniWoB's own reward,
per task and per round. Round 1's policy is the random explorer, the baseline.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import table

STYLES = ("o-", "s--", "^:")  # the curves stay apart where two configurations measure the same
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "unfiltered": {"TRAJFORGE_EVOLVE_FILTERING": "false"},
    "verifier-free": {"TRAJFORGE_CRITICS_OUTCOME": "critic"},
}


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--out {out} default={run}"


def run(home: Path, rounds: int, env: dict[str, str]) -> float:
    """`trajforge evolve --rounds N` in `home`; its wall time in seconds."""
    home.mkdir(parents=True, exist_ok=True)
    trajforge = Path(sys.executable).with_name("trajforge")
    started = time.monotonic()
    subprocess.run(
        [str(trajforge), "evolve", "--rounds", str(rounds)],
        cwd=home,
        env={**os.environ, "TRAJFORGE_HOME": str(home / ".trajforge"), **env},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - started


MINIWOB = Path(__file__).resolve().parents[1] / "docs" / "examples" / "miniwob10.yaml"


def run_config(home: Path, config: Path, rounds: int) -> float:
    """`trajforge evolve --config` with the config's apps and sizes, in `home`; its wall time."""
    import yaml

    home.mkdir(parents=True, exist_ok=True)
    settings = {**yaml.safe_load(config.read_text()), "home": str(home / ".trajforge")}
    (home / "run.yaml").write_text(yaml.safe_dump(settings))
    trajforge = Path(sys.executable).with_name("trajforge")
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJFORGE_")}
    subprocess.run(
        [str(trajforge), "evolve", "--config", "run.yaml", "--rounds", str(rounds)],
        cwd=home, env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - started


def miniwob(rounds: int, home: Path | None) -> None:
    """The loop on ten MiniWoB++ tasks: held-out success per task and round."""
    with tempfile.TemporaryDirectory(prefix="trajforge-miniwob-") as tmp:
        seconds = 0.0
        if home is None:
            home = Path(tmp)
            seconds = run_config(home, MINIWOB, rounds)
        c = curves(home)
    n = len(c["heldout"])
    header = ["task", *(f"r{i}" for i in range(1, n + 1))]
    rows = [[app, *(_pct(v) for v in ys)] for app, ys in sorted(c["heldout_apps"].items())]
    rows.append(["all ten", *(_pct(v) for v in c["heldout"])])
    title = "MiniWoB++: held-out success by MiniWoB's reward (r1: the random explorer, the baseline)"
    print(table(title, header, rows))
    rows = [[app, *(f"{v:.0%}" for v in ys)] for app, ys in sorted(c["apps"].items())]
    rows.append(["all ten", *(f"{v:.0%}" for v in c["overall"])])
    print(table("MiniWoB++: success on each round's new seeds (the round's policy)", header, rows))
    last = c["heldout"][-1]
    gain = f"{last / c['heldout'][0]:.2f}x the explorer" if last and c["heldout"][0] else ""
    print(f"held-out at round {n}: {_pct(last)} ({gain}; aim: >= 80%); {seconds:.0f}s")


def curves(home: Path) -> dict[str, Any]:
    """Per round: overall and per-app success rates, and the revisits' pass rates."""
    rounds = json.loads((home / ".trajforge" / "report" / "rounds.json").read_text())["rounds"]
    out: dict[str, Any] = {"overall": [], "apps": {}, "revisits": [], "heldout": [], "heldout_apps": {}}
    out["promotions"] = []
    for r in rounds:
        out["overall"].append(r["overall"]["success_rate"])
        for app, figures in r["apps"].items():
            out["apps"].setdefault(app, []).append(figures["success_rate"])
        out["revisits"].extend(r.get("revisits", []))
        held = r.get("heldout") or {}
        out["heldout"].append(held.get("success_rate"))
        for app, (won, n) in (held.get("per_app") or {}).items():
            out["heldout_apps"].setdefault(app, []).append(won / n if n else None)
        promotion = r.get("promotion") or {}
        out["promotions"].append(promotion.get("promoted"))
    return out


def _never_falls(curve: list[float | None]) -> str:
    points = [p for p in curve if p is not None]
    if not points:
        return "not measured"
    steps = enumerate(itertools.pairwise(curve))
    falls = [f"r{i + 2}" for i, (a, b) in steps if a is not None and b is not None and b < a]
    return "True" if not falls else f"False (falls at {', '.join(falls)})"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def checks(found: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Issue 19's targets against the measured curves."""
    default = found["default"]["overall"]
    held = found["default"]["heldout"]
    rows = [
        ["success never falls (default, new queries)", _never_falls(default)],
        ["success never falls (default, held-out set)", _never_falls(held)],
        ["default ends >= 70% (new queries / held-out)", f"{default[-1]:.0%} / {_pct(held[-1])}"],
        [
            "no app ends below 40% (default, new queries)",
            ", ".join(f"{a} {v[-1]:.0%}" for a, v in sorted(found["default"]["apps"].items())),
        ],
        [
            "no app ends below 40% (default, held-out)",
            ", ".join(f"{a} {_pct(v[-1])}" for a, v in sorted(found["default"]["heldout_apps"].items())),
        ],
    ]
    if "unfiltered" in found:
        unf = found["unfiltered"]["overall"]
        rows.append(
            [
                "filtered >= unfiltered from round 2 (new queries)",
                str(all(d >= u for d, u in zip(default[1:], unf[1:], strict=False))),
            ]
        )
        pairs = list(zip(held[1:], found["unfiltered"]["heldout"][1:], strict=False))
        if all(None not in p for p in pairs):
            rows.append(["filtered >= unfiltered from r2 (held-out)", str(all(d >= u for d, u in pairs))])
    if "verifier-free" in found:
        gap = max(abs(d - v) for d, v in zip(default, found["verifier-free"]["overall"], strict=False))
        rows.append(["verifier-free within 5 points of default (new queries)", f"largest gap {gap:.1%}"])
        vf_pairs = zip(held, found["verifier-free"]["heldout"], strict=False)
        gaps = [abs(d - v) for d, v in vf_pairs if d is not None and v is not None]
        if gaps:
            rows.append(["verifier-free within 5 points (held-out)", f"largest gap {max(gaps):.1%}"])
    revisits = found["default"]["revisits"]
    if revisits:
        before = sum(r["before"] for r in revisits) / len(revisits)
        after = sum(r["after"] for r in revisits) / len(revisits)
        rows.append(
            ["revisited queries' pass rate rises", f"{before:.0%} -> {after:.0%} ({len(revisits)} revisits)"]
        )
    return rows


def plot(found: dict[str, dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    apps = sorted(found["default"]["apps"])
    fig, grid = plt.subplots(2, 1 + len(apps), figsize=(4 * (1 + len(apps)), 6.2), sharey=True, squeeze=False)
    for axes, (total, per_app, what) in zip(
        grid, [("overall", "apps", "new queries"), ("heldout", "heldout_apps", "held-out set")], strict=True
    ):
        for ax, title in zip(axes, ["overall", *apps], strict=True):
            for (name, c), style in zip(found.items(), STYLES, strict=False):
                ys = c[total] if title == "overall" else c[per_app].get(title, [])
                xs = [i + 1 for i, y in enumerate(ys) if y is not None]
                ax.plot(xs, [100 * y for y in ys if y is not None], style, label=name, alpha=0.8)
            ax.set_title(f"{title}, {what}")
            ax.set_xlabel("round")
            ax.set_ylim(0, 100)
        axes[0].set_ylabel("success %")
    grid[0][0].legend(fontsize=8)
    fig.tight_layout()
    path = out / "loop.png"
    fig.savefig(path, dpi=90)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("bench-loop"))
    parser.add_argument("homes", nargs="*", help="NAME=HOME of finished runs to read instead of running")
    parser.add_argument("--miniwob", action="store_true", help="the loop on ten MiniWoB++ tasks instead")
    parser.add_argument("--miniwob-home", type=Path, help="a finished MiniWoB run's home to read")
    args = parser.parse_args()
    if args.miniwob or args.miniwob_home:
        miniwob(args.rounds, args.miniwob_home)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    homes = dict(h.split("=", 1) for h in args.homes)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="trajforge-loop-") as tmp:
        found: dict[str, dict[str, Any]] = {}
        for name, env in VARIANTS.items():
            home = Path(homes[name]) if name in homes else Path(tmp) / name
            if name not in homes:
                if homes:
                    continue  # only the homes given
                seconds[name] = run(home, args.rounds, env)
            found[name] = curves(home)
        n = max(len(c["overall"]) for c in found.values())
        header = ["configuration", *(f"r{i}" for i in range(1, n + 1)), "seconds"]
        rows = [
            [name, *(f"{v:.0%}" for v in c["overall"]), f"{seconds.get(name, 0):.0f}"]
            for name, c in found.items()
        ]
        print(table("success rate by round (the round's policy on its new queries)", header, rows))
        held_rows = [[name, *(_pct(v) for v in c["heldout"]), ""] for name, c in found.items()]
        print(table("success rate by round (the round's policy on the held-out set)", header, held_rows))
        gate_rows = [
            [name, *("-" if p is None else "promoted" if p else "kept" for p in c["promotions"]), ""]
            for name, c in found.items()
        ]
        print(table("the gate on the candidate trained after each round", header, gate_rows))
        rounds_header = ["app", *(f"r{i}" for i in range(1, n + 1))]
        for name, c in found.items():
            app_rows = [[app, *(f"{v:.0%}" for v in ys)] for app, ys in sorted(c["apps"].items())]
            print(table(f"{name}: success by app, new queries", rounds_header, app_rows))
            app_rows = [[app, *(_pct(v) for v in ys)] for app, ys in sorted(c["heldout_apps"].items())]
            print(table(f"{name}: success by app, held-out set", rounds_header, app_rows))
        print(table("issue 19 targets", ["target", "measured"], checks(found)))
        (args.out / "loop.json").write_text(json.dumps({"seconds": seconds, **found}, indent=1))
        print(f"plot: {plot(found, args.out)}")


if __name__ == "__main__":
    main()
