"""The report's critics table: per round and app, each critic's verdicts against the anchors, out of
sample (the learned critic judged by models fitted without the episode's query, and fitted on the
other apps only), with the round's learned checkpoint."""

from __future__ import annotations

import html
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from critics.learned import NAME, VERSION
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
