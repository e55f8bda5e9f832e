"""The words verdicts are written in, which critics, curation, annotation and the report share:
the consensus channel's key, the labels that are no verdict, and an episode's decided outcome
(`critics.outcomes` decides it; curation and the exports read it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CONSENSUS = ("consensus", "5")  # the configured channels combined (`critics.consensus`)
SILENT = ("abstain", "undecided")  # episode labels that are no verdict (an unparsed one counts as "no")
UNTRUSTED = "critic_untrusted"  # no anchor, and the app's consensus is not (yet) trusted
UNDECIDED = "critic_undecided"  # no anchor, and every critic channel abstained


@dataclass(frozen=True)
class Outcome:
    success: bool | None  # None: nobody may decide it; a human must
    source: str  # verifier | human | critic | UNTRUSTED | UNDECIDED | "none"
    accuracy: float | None = None  # the consensus's measured accuracy, when the critic decided
    anchored: int = 0  # the anchored episodes that accuracy was measured on
    overrides: str | None = None  # the verifier's label a human reversed

    def provenance(self) -> dict[str, Any]:
        """What a sample records about its outcome (`provenance.anchor`)."""
        out: dict[str, Any] = {"source": self.source, "label": "success" if self.success else "failure"}
        if self.accuracy is not None:
            out.update(accuracy=round(self.accuracy, 4), anchored=self.anchored)
        if self.overrides is not None:
            out["overrides"] = self.overrides
        return out


# the round stats' key of the audit sample, {episode id: the label the critics published} (`critics.audit`)
AUDIT = "critic_audit"
# the round stats' key of the order the label queue asks for the undecided episodes (`critics.error_control`)
LABEL_ORDER = "label_order"
