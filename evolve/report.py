"""The round report: one HTML page with PNG plots, per round, from what the database holds.

`collect` reads the figures (success, pass rates, critic vs anchor accuracy, dedup
retention, samples by category, drops by reason, model tokens and cost, dataset
versions and lineage, example trajectories); `write_report` renders them with
matplotlib (Agg backend, no display needed) into `index.html` plus `*.png`, and the same
figures per round and per app for machines into `rounds.json` (`evolve.rounds_json`).
"""

from __future__ import annotations

import html
import io
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from evolve.report_critics import critic_table, trust_tables
from evolve.rounds_json import write_rounds_json
from querygen.revisits import revisited
from rollout.records import MODEL_FAULTS
from storage.datasets import VersionRef, list_versions, manifest
from storage.llm_cache import usage_by_stage
from storage.models import Anchor, App, Episode, Exclusion, Judgment, Policy, Round, Sample, Step
from storage.models import Query as QueryRow
from storage.objectstore import ObjectStore, frame_reader
from trajforge.verdicts import CONSENSUS

EXAMPLES = 4  # trajectories shown, success and failure alternating
THUMB = 180  # px width of an example screenshot


@dataclass
class RoundFigures:
    number: int
    policy: str
    status: str
    episodes: int = 0  # played to an outcome: an episode the policy's endpoint failed is not one
    successes: int = 0
    model_faults: int = 0  # episodes ended by a failed policy call (`rollout.records.MODEL_FAULTS`)
    per_app: dict[str, list[int]] = field(default_factory=dict)
    pass_rates: list[float] = field(default_factory=list)  # per query, the round's own policy
    accuracy: dict[str, float] = field(default_factory=dict)  # critic channel -> accuracy vs anchors
    dedup: dict[str, Any] = field(default_factory=dict)
    recovery: dict[str, Any] = field(default_factory=dict)  # `curation.recovery.RecoveryReport.as_dict`
    categories: Counter[str] = field(default_factory=Counter)  # kept samples
    drops: Counter[str] = field(default_factory=Counter)  # every dropped item by reason
    tokens: int = 0
    cost_usd: float = 0.0
    dataset_version: int | None = None
    manifest_sha256: str = ""
    next_policy: str = ""

    @property
    def success_rate(self) -> float | None:
        """None with no episode played to an outcome (every policy call failed): not 0%."""
        return self.successes / self.episodes if self.episodes else None

    @property
    def retention(self) -> float | None:
        total = self.dedup.get("total") or 0
        return self.dedup.get("kept", 0) / total if total else None


def success_text(rate: float | None, model_faults: int = 0) -> str:
    """A success rate in words: a round whose every policy call failed has none, and says why."""
    if rate is not None:
        return f"{rate:.0%}"
    return f"n/a (every policy call failed: {model_faults} episodes)" if model_faults else "n/a (no episodes)"


def _recovery(rec: dict[str, Any]) -> str:
    """Escapes observed on a device, of the sites probed; what pixel coincidence would have paired."""
    if not rec:
        return ""
    made = (rec.get("samples") or {}).get("error_escape", 0)
    return f"{made} of {rec.get('probed', 0)} ({rec.get('coincident', 0)})"


def collect(sessions: sessionmaker[Session]) -> list[RoundFigures]:
    """Every round's figures, oldest first."""
    out: list[RoundFigures] = []
    with sessions() as s:
        for rnd in s.scalars(select(Round).order_by(Round.number)):
            policy = s.get(Policy, rnd.policy_id)
            stats = rnd.stats or {}
            fig = RoundFigures(rnd.number, f"{policy.name}@{policy.version}" if policy else "?", rnd.status)
            tally_episodes(s, rnd, fig)
            channels = (stats.get("calibration") or {}).get("channels", {})
            fig.accuracy = {name: float(c.get("accuracy", 0.0)) for name, c in channels.items() if c.get("n")}
            fig.dedup = stats.get("dedup") or {}
            fig.recovery = stats.get("recovery") or {}
            fig.dataset_version = stats.get("dataset_version")
            fig.manifest_sha256 = stats.get("manifest_sha256") or ""
            fig.next_policy = stats.get("next_policy") or ""
            for category, status, reason, n in s.execute(
                select(Sample.category, Sample.status, Sample.reason, func.count())
                .where(Sample.round_id == rnd.id)
                .group_by(Sample.category, Sample.status, Sample.reason)
            ):
                if status == "kept":
                    fig.categories[category] += n
                else:
                    fig.drops[f"sample:{reason or 'dropped'}"] += n
            for stage, reason, n in s.execute(
                select(Exclusion.stage, Exclusion.reason, func.count())
                .where(Exclusion.round_id == rnd.id)
                .group_by(Exclusion.stage, Exclusion.reason)
            ):
                fig.drops[f"{stage}:{reason}"] += n
            for reason, n in s.execute(
                select(Step.parse_error, func.count())
                .join(Episode, Episode.id == Step.episode_id)
                .where(Episode.round_id == rnd.id, Step.parse_error.is_not(None))
                .group_by(Step.parse_error)
            ):
                fig.drops[f"rollout:{reason}"] += n
            usage = usage_by_stage(sessions, rnd.id).values()
            judged = s.scalar(
                select(func.coalesce(func.sum(Judgment.prompt_tokens + Judgment.completion_tokens), 0))
                .join(Episode, Episode.id == Judgment.target_id)
                .where(Judgment.target == "episode", Episode.round_id == rnd.id)
            )
            fig.tokens = sum(u.prompt_tokens + u.completion_tokens for u in usage) + int(judged or 0)
            fig.cost_usd = sum(u.cost_usd for u in usage)
            out.append(fig)
    return out


def tally_episodes(s: Session, rnd: Round, fig: RoundFigures) -> None:
    """The round's own policy on its new queries (revisits apart): episodes and successes, per
    app, and pass rates per query."""
    per_query: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for app, query, outcome, reason in s.execute(
        select(App.name, QueryRow.uid, Episode.outcome, Episode.reason)
        .join(QueryRow, QueryRow.id == Episode.query_id)
        .join(App, App.id == QueryRow.app_id)
        .where(
            Episode.round_id == rnd.id,
            Episode.policy_id == rnd.policy_id,
            QueryRow.uid.not_in(revisited(rnd)),
        )
    ):
        if reason in MODEL_FAULTS:  # the endpoint failed, not the policy: no outcome to count
            fig.model_faults += 1
            continue
        won = int(outcome == "success")
        fig.episodes += 1
        fig.successes += won
        fig.per_app.setdefault(app, [0, 0])
        fig.per_app[app][0] += won
        fig.per_app[app][1] += 1
        per_query[query][0] += won
        per_query[query][1] += 1
    fig.pass_rates = [won / n for won, n in per_query.values()]


def examples(sessions: sessionmaker[Session], number: int, n: int = EXAMPLES) -> list[dict[str, Any]]:
    """A few trajectories of round `number`: instruction, verdicts, steps with screenshots."""
    picked: list[dict[str, Any]] = []
    with sessions() as s:
        rnd = s.scalars(select(Round).where(Round.number == number)).first()
        if rnd is None:
            return []
        for outcome in ("success", "failure"):
            rows = s.execute(
                select(Episode, QueryRow.instruction)
                .join(QueryRow, QueryRow.id == Episode.query_id)
                .where(Episode.round_id == rnd.id, Episode.outcome == outcome)
                .order_by(Episode.uid)
                .limit((n + 1) // 2)
            ).all()
            for episode, instruction in rows:
                verdicts = {
                    f"{j.critic}": j.label
                    for j in s.scalars(
                        select(Judgment).where(Judgment.target == "episode", Judgment.target_id == episode.id)
                    )
                }
                anchor = s.scalars(select(Anchor).where(Anchor.episode_id == episode.id)).first()
                steps = s.scalars(
                    select(Step).where(Step.episode_id == episode.id).order_by(Step.index)
                ).all()
                picked.append(
                    {
                        "uid": episode.uid,
                        "instruction": instruction,
                        "outcome": episode.outcome,
                        "reason": episode.reason,
                        "anchor": f"{anchor.source}: {anchor.label}" if anchor else "none",
                        "verdicts": verdicts,
                        "steps": [(st.screenshot, st.raw_output, st.parse_error) for st in steps[:8]],
                        "more": max(0, len(steps) - 8),
                    }
                )
    return picked


def _legend(plt: Any, **style: Any) -> None:
    """A legend when the plot has labelled lines (an empty one prints matplotlib's warning)."""
    if plt.gca().get_legend_handles_labels()[0]:
        plt.legend(**style)


def _success(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    rates = [float("nan") if f.success_rate is None else f.success_rate for f in figs]
    plt.plot(rounds, rates, "o-", lw=2.5, label="all apps")
    for app in sorted({a for f in figs for a in f.per_app}):
        rates = [f.per_app[app][0] / f.per_app[app][1] if app in f.per_app else float("nan") for f in figs]
        plt.plot(rounds, rates, ".--", alpha=0.6, label=app)
    plt.ylim(-0.02, 1.02)
    plt.xlabel("round")
    plt.xticks(rounds)
    _legend(plt, fontsize=7)


def _pass_rates(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    bins = [i / 8 for i in range(9)]
    for f in figs:
        if f.pass_rates:
            plt.hist(f.pass_rates, bins=bins, histtype="step", lw=2, label=f"round {f.number}")
    plt.xlabel("pass rate per query (k of K rollouts)")
    _legend(plt, fontsize=7)


def _accuracy(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    for channel in sorted({c for f in figs for c in f.accuracy}):
        plt.plot(rounds, [f.accuracy.get(channel, float("nan")) for f in figs], "o-", label=channel)
    plt.ylim(-0.02, 1.02)
    plt.xticks(rounds)
    _legend(plt, fontsize=7)


def _retention(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    plt.bar(rounds, [f.retention if f.retention is not None else 0.0 for f in figs])
    plt.ylim(0, 1.05)
    plt.xticks(rounds)


def _categories(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    bottom = [0] * len(figs)
    for category in sorted({c for f in figs for c in f.categories}):
        values = [f.categories.get(category, 0) for f in figs]
        plt.bar(rounds, values, bottom=bottom, label=category)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    plt.xticks(rounds)
    _legend(plt, fontsize=6, ncol=2)


def _top_drops(figs: list[RoundFigures]) -> list[tuple[str, int]]:
    return sum((f.drops for f in figs), Counter[str]()).most_common(12)


def _drops(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    top = _top_drops(figs)
    plt.barh([k for k, _ in top][::-1], [v for _, v in top][::-1])
    plt.yticks(fontsize=7)


def _tokens(plt: Any, figs: list[RoundFigures], rounds: list[int]) -> None:
    plt.bar(rounds, [f.tokens for f in figs])
    plt.xticks(rounds)


Draw = Callable[[Any, list[RoundFigures], list[int]], None]
# (file, title, figure height in inches (None: by the figures), how it is drawn)
_PLOTS: tuple[tuple[str, str, float | None, Draw], ...] = (
    ("success_rate.png", "Success rate of the round's policy (verifier)", 3.4, _success),
    ("pass_rate_hist.png", "Pass-rate histogram", 3.4, _pass_rates),
    ("critic_accuracy.png", "Critic vs anchor accuracy (trajectory verdicts)", 3.4, _accuracy),
    ("dedup_retention.png", "Dedup retention (trajectories kept)", 3.0, _retention),
    ("samples_by_category.png", "Kept samples per category", 3.6, _categories),
    ("drops_by_reason.png", "Dropped items by reason (all rounds)", None, _drops),
    ("tokens.png", "Model tokens per round (0: offline critics and policy)", 3.0, _tokens),
)


def _plots(figs: list[RoundFigures], out: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [f.number for f in figs]
    for name, title, height, draw in _PLOTS:
        plt.figure(figsize=(6, height if height is not None else 0.6 + 0.3 * max(len(_top_drops(figs)), 1)))
        draw(plt, figs, rounds)
        plt.title(title)
        plt.tight_layout()
        plt.savefig(out / name, dpi=90)
        plt.close()
    return [(name, title) for name, title, _, _ in _PLOTS]


def _thumb(png: bytes) -> bytes:
    img = Image.open(io.BytesIO(png)).convert("RGB")
    img.thumbnail((THUMB, THUMB * 3))
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def _version_row(sessions: sessionmaker[Session], store: ObjectStore, v: VersionRef) -> str:
    parent, lineage = "-", ""
    if v.status == "sealed":
        man = manifest(sessions, store, v.name, v.version)
        parent = f"v{man.parent.version}" if man.parent else "none"
        policies = ", ".join(f"r{p.round}:{p.policy}@{p.version}" for p in man.lineage.policies)
        lineage = f"{man.rows} rows; rounds {man.lineage.rounds}; policies {policies}"
    return (
        f"<tr><td>{html.escape(v.name)}</td><td>v{v.version}</td><td>{v.status}</td>"
        f"<td><code>{(v.manifest_sha256 or '')[:16]}</code></td><td>{parent}</td>"
        f"<td>{html.escape(lineage)}</td></tr>"
    )


def _round_row(f: RoundFigures) -> str:
    esc = html.escape
    return (
        f"<tr><td>{f.number}</td><td>{esc(f.policy)}</td><td>{f.status}</td><td>{f.successes}/{f.episodes}</td>"
        f"<td><b>{esc(success_text(f.success_rate, f.model_faults))}</b></td>"
        f"<td>{f.accuracy.get(':'.join(CONSENSUS), 0.0):.0%}</td>"
        f"<td>{'' if f.retention is None else f'{f.retention:.0%}'}</td>"
        f"<td>{_recovery(f.recovery)}</td>"
        f"<td>{sum(f.categories.values())}</td><td>{sum(f.drops.values())}</td><td>{f.tokens}</td>"
        f"<td>${f.cost_usd:.2f}</td>"
        f"<td>{'' if f.dataset_version is None else f'v{f.dataset_version}'} "
        f"<code>{f.manifest_sha256[:12]}</code></td><td>{esc(f.next_policy)}</td></tr>"
    )


def _example_card(ex: dict[str, Any], shots: Path, frames: Callable[[str], bytes]) -> str:
    """One example trajectory: its steps as thumbnails (written once into `shots`), its verdicts."""
    esc = html.escape
    cells = []
    for i, (sha, raw, error) in enumerate(ex["steps"]):
        name = f"{sha[:16]}.png"
        if not (shots / name).exists():
            (shots / name).write_bytes(_thumb(frames(sha)))
        label = esc(f"{i + 1}. {error or raw}")[:160]
        cells.append(
            f"<figure><img src='examples/{name}' width='{THUMB}'><figcaption>{label}</figcaption></figure>"
        )
    verdicts = ", ".join(f"{esc(k)}={esc(v)}" for k, v in sorted(ex["verdicts"].items()))
    more = f"<p>… {ex['more']} more steps</p>" if ex["more"] else ""
    return (
        f"<section><h3>{esc(ex['instruction'])}</h3><p>outcome <b>{ex['outcome']}</b>"
        f"{' (' + esc(ex['reason']) + ')' if ex['reason'] else ''}; anchor {esc(ex['anchor'])}; "
        f"critics: {verdicts or 'none'}</p><div class='steps'>{''.join(cells)}</div>{more}</section>"
    )


def write_report(sessions: sessionmaker[Session], store: ObjectStore, out: Path) -> Path:
    """Write `out/index.html` and its PNGs; return the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    figs = collect(sessions)
    plots = _plots(figs, out) if figs else []
    esc = html.escape
    rows = "".join(_round_row(f) for f in figs)
    versions = "".join(_version_row(sessions, store, v) for v in list_versions(sessions))
    shots = out / "examples"
    shots.mkdir(exist_ok=True)
    frames = frame_reader(store)
    cards = [_example_card(ex, shots, frames) for ex in (examples(sessions, figs[-1].number) if figs else [])]
    images = "".join(
        f"<figure><img src='{name}'><figcaption>{esc(t)}</figcaption></figure>" for name, t in plots
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>trajforge rounds</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}
figure{{display:inline-block;margin:6px;vertical-align:top}}
.steps figcaption{{font-size:11px;max-width:{THUMB}px;word-break:break-all}}</style></head><body>
<h1>trajforge: {len(figs)} rounds</h1>
<h2>Rounds</h2><table><tr><th>round</th><th>policy</th><th>status</th><th>successes</th><th>success rate</th>
<th>consensus accuracy</th><th>dedup retention</th>
<th>recovery pairs (probed; coincidence method)</th><th>kept samples</th><th>dropped items</th><th>tokens</th>
<th>cost</th><th>dataset version</th><th>next policy</th></tr>{rows}</table>
<h2>Critics against the anchors, out of sample</h2>
<p>The learned critic's verdict on an episode comes from a model fitted without any episode of its query;
the last column fits it on the other apps only. κ is Cohen's kappa. The last row pools every round; the goals
are 95% on held-out queries with 97% precision, and 90% fitted on the other apps.</p>{critic_table(sessions)}
{trust_tables(sessions)}
<h2>Plots</h2>{images}
<h2>Dataset versions and lineage</h2><table><tr><th>dataset</th><th>version</th><th>status</th>
<th>manifest sha256</th><th>parent</th><th>lineage</th></tr>{versions}</table>
<h2>Example trajectories (round {figs[-1].number if figs else "-"})</h2>{"".join(cards)}
</body></html>"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    write_rounds_json(sessions, out)
    return index
