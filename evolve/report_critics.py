"""The report's critics table: per round and app, each critic's verdicts against the anchors, out of
sample (the learned critic judged by models fitted without the episode's query, and fitted on the
other apps only), with the round's learned checkpoint."""

from __future__ import annotations

import html
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.learned import NAME, VERSION
from critics.trust import TRUST, claimed_text
from storage.models import Round
from trajforge.metrics import ChannelStats, kappa_text, rate_text
from trajforge.verdicts import CONSENSUS

LEARNED = f"{NAME}:{VERSION}"


def _cell(st: dict[str, Any] | None) -> str:
    if not st or not st.get("n"):
        return "<td>-</td>"
    return (
        f"<td>{st['accuracy']:.0%} (n {st['n']}, precision {rate_text(st, 'precision', 0)}, "
        f"recall {rate_text(st, 'recall', 0)}, κ {kappa_text(st.get('kappa'))})</td>"
    )


def trust_tables(sessions: sessionmaker[Session]) -> str:
    """Per round, the critics' trust table (`critics.trust`) as HTML: per task what the critic would
    decide on anchored episodes and how often it is right, its coverage of the unlabelled ones, and
    the labels the task has and still needs."""

    def cell(r: dict[str, Any]) -> str:
        if r["value"] is None:
            return "<td>undefined</td>"
        lo, hi = r["interval"]
        return f"<td>{r['value']:.0%} [{lo:.0%}, {hi:.0%}] ({r['right']}/{r['of']})</td>"

    rows, claims = [], []
    with sessions() as s:
        for rnd in s.scalars(select(Round).order_by(Round.number)):
            table = (rnd.stats or {}).get(TRUST) or {}
            if claimed := claimed_text(table.get("overall") or {}):
                claims.append(f"<li>round {rnd.number}: {html.escape(claimed)}</li>")
            for task, row in table.items():
                need = row.get("labels_needed")
                more = (
                    ""
                    if need == 0 or "labels_needed" not in row
                    else " (below the bar)"
                    if need is None
                    else f" (+{need})"
                )
                rows.append(
                    f"<tr><td>{rnd.number}</td><td>{html.escape(task)}</td><td>{row['n']}</td>"
                    + "".join(cell(row[k]) for k in ("precision", "npv", "accuracy", "coverage"))
                    + f"<td>{row['labels']}{more}</td></tr>"
                )
    return (
        "<h2>How far the critics are trusted, per task</h2><p>Of each task's anchored episodes, those the "
        "critic would decide without the anchor, and how often it is right (Wilson 95% intervals); its "
        "coverage of the episodes with no anchor; the labels the task has, and how many more the trust gate "
        "asks. The gate measured its accuracy on these anchors: precision and NPV here are in-sample for it "
        "(<code>python -m bench.bench_critics</code> measures them out of sample).</p>"
        "<table><tr><th>round</th><th>task</th><th>anchored</th><th>precision</th><th>NPV</th>"
        "<th>accuracy</th><th>coverage of unlabelled</th><th>labels (more needed)</th></tr>"
        + "".join(rows)
        + "</table>"
        + (f"<p>The error rule, per round:</p><ul>{''.join(claims)}</ul>" if claims else "")
    )


def critic_table(sessions: sessionmaker[Session]) -> str:
    """An HTML table: round, app, learned critic (held-out queries), consensus, learned critic fitted
    on the other apps, and the round's checkpoint."""
    rows = []
    cells: dict[str, list[dict[str, Any] | None]] = {"held": [], "consensus": [], "loao": []}
    with sessions() as s:
        for rnd in s.scalars(select(Round).order_by(Round.number)):
            stats = rnd.stats or {}
            calibration = stats.get("calibration") or {}
            loao = (calibration.get("leave_one_app_out") or {}).get(NAME, {})
            fitted = stats.get("learned_critic") or {}
            checkpoint = html.escape(
                f"{fitted.get('version') or 'none'} ({fitted.get('anchored', 0)} anchors)"
            )
            for app, channels in sorted((calibration.get("by_app") or {}).items()):
                cells["held"].append(channels.get(LEARNED))
                cells["consensus"].append(channels.get(":".join(CONSENSUS)))
                cells["loao"].append(loao.get(app))
                rows.append(
                    f"<tr><td>{rnd.number}</td><td>{html.escape(app)}</td>{_cell(channels.get(LEARNED))}"
                    f"{_cell(channels.get(':'.join(CONSENSUS)))}{_cell(loao.get(app))}<td>{checkpoint}</td></tr>"
                )
    if rows:
        rows.append(
            "<tr><td>all</td><td>all apps</td>"
            + "".join(_cell(ChannelStats.pooled(column).summary()) for column in cells.values())
            + "<td></td></tr>"
        )
    return (
        "<table><tr><th>round</th><th>app</th><th>learned critic, held-out queries</th>"
        "<th>consensus</th><th>learned critic fitted on the other apps</th><th>checkpoint</th></tr>"
        + "".join(rows)
        + "</table>"
    )
