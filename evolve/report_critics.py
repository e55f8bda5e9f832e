"""The report's critics table: per round and app, each critic's verdicts against the anchors, out of
sample (the learned critic judged by models fitted without the episode's query, and fitted on the
other apps only), with the round's learned checkpoint."""

from __future__ import annotations

import html
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.learned import NAME, VERSION
from storage.anchors import CONSENSUS
from storage.models import Round
from trajforge.metrics import ChannelStats

LEARNED = f"{NAME}:{VERSION}"


def _cell(st: dict[str, Any] | None) -> str:
    if not st or not st.get("n"):
        return "<td>-</td>"
    return (
        f"<td>{st['accuracy']:.0%} (n {st['n']}, precision {st['precision']:.0%}, "
        f"recall {st['recall']:.0%}, κ {st.get('kappa', 0.0):.2f})</td>"
    )


def _pool(into: ChannelStats, st: dict[str, Any] | None) -> None:
    for k in ("tp", "fp", "tn", "fn"):
        setattr(into, k, getattr(into, k) + int((st or {}).get(k, 0)))


def critic_table(sessions: sessionmaker[Session]) -> str:
    """An HTML table: round, app, learned critic (held-out queries), consensus, learned critic fitted
    on the other apps, and the round's checkpoint."""
    rows = []
    pooled = {column: ChannelStats() for column in ("held", "consensus", "loao")}
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
                for column, st in (
                    ("held", channels.get(LEARNED)),
                    ("consensus", channels.get(":".join(CONSENSUS))),
                    ("loao", loao.get(app)),
                ):
                    _pool(pooled[column], st)
                rows.append(
                    f"<tr><td>{rnd.number}</td><td>{html.escape(app)}</td>{_cell(channels.get(LEARNED))}"
                    f"{_cell(channels.get(':'.join(CONSENSUS)))}{_cell(loao.get(app))}<td>{checkpoint}</td></tr>"
                )
    if rows:
        rows.append(
            "<tr><td>all</td><td>all apps</td>"
            + "".join(_cell(pooled[c].summary()) for c in ("held", "consensus", "loao"))
            + "<td></td></tr>"
        )
    return (
        "<table><tr><th>round</th><th>app</th><th>learned critic, held-out queries</th>"
        "<th>consensus</th><th>learned critic fitted on the other apps</th><th>checkpoint</th></tr>"
        + "".join(rows)
        + "</table>"
    )
