"""Offline trajectory channels that are not learned: the visual channel and the consensus rule.

- `VisualTrajectoryCritic`: from screenshots only: the final frame against the end frames of
  anchored successful episodes of other queries with the same goal (equal, or a near-equal
  difference hash without the status bar); it abstains when there is none.
- `consensus`: AND (GUI-Owl's rule), majority, or weighted, over the channels that voted.

The learned critic is `critics.learned`; the spec's route check, which reads the spec's widget ids
and so is a programmatic check rather than a critic, is `trajforge.world.route_check`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from trajforge.domain import Query, StepView, goal_key

BAR_SHARE = 0.05  # top and bottom share of a screenshot the visual channel ignores (status, navigation)
SIGNATURE_SIDE = 16  # the visual signature is SIDE x SIDE difference bits


@dataclass(frozen=True)
class ChannelVerdict:
    channel: str
    success: bool | None  # None: the channel abstains
    reason: str


def frame_signature(png: bytes) -> int:
    """A 256-bit difference hash of a screenshot without its status and navigation bars (a clock,
    a battery level or a notification icon must not make two screens differ)."""
    with Image.open(io.BytesIO(png)) as img:
        grey = img.convert("L")
        w, h = grey.size
        body = grey.crop((0, round(h * BAR_SHARE), w, round(h * (1 - BAR_SHARE))))
        cells = body.resize((SIGNATURE_SIDE + 1, SIGNATURE_SIDE), Image.Resampling.BILINEAR).load()
    bits = 0
    for y in range(SIGNATURE_SIDE):
        for x in range(SIGNATURE_SIDE):
            bits = (bits << 1) | int(cells[x, y] > cells[x + 1, y])  # type: ignore[index,operator]
    return bits


class VisualTrajectoryCritic:
    """The final frame against the end frames of recorded successful episodes of the same goal.

    `references` maps a goal key to {end frame hash: uids of the queries of successful episodes
    ending there}; an episode's own query is never its reference (the channel is judged out of
    sample). Without a reference the channel abstains.
    Frames match when their hashes are equal or, given `frames` (bytes by hash), when their
    signatures (`frame_signature`) differ in at most `tolerance` of their bits. It abstains on a
    suite's task (MiniWoB++ covers the page once it has ended the episode: every end looks alike).
    """

    name, version = "heuristic_visual", "4"

    def __init__(
        self,
        references: dict[str, dict[str, set[str]]] | None = None,
        frames: Callable[[str], bytes] | None = None,
        tolerance: float = 0.01,  # 2 of 256 bits: measured, other screens of an app differ by 3+
    ) -> None:
        self.references = references or {}
        self.frames = frames
        self.tolerance = tolerance
        self._signatures: dict[str, int] = {}

    def _signature(self, sha: str) -> int:
        if sha not in self._signatures:
            assert self.frames is not None
            self._signatures[sha] = frame_signature(self.frames(sha))
        return self._signatures[sha]

    def _matches(self, frame: str, references: set[str]) -> bool:
        if frame in references:
            return True
        if self.frames is None:
            return False
        limit = self.tolerance * SIGNATURE_SIDE * SIGNATURE_SIDE
        mine = self._signature(frame)
        return any((mine ^ self._signature(r)).bit_count() <= limit for r in references)

    def judge(self, query: Query, steps: list[StepView], backend: str = "") -> ChannelVerdict:
        if not steps:
            return ChannelVerdict("visual", False, "no_steps")
        if query.source == "environment":  # a page that ends its own episode covers its end state
            return ChannelVerdict("visual", None, "environment_task")
        references = self.references.get(goal_key(query.goal, backend), {})
        frames = {frame for frame, uids in references.items() if uids - {query.uid}}
        if not frames:
            return ChannelVerdict("visual", None, "no_reference")
        ok = self._matches(steps[-1].after, frames)
        return ChannelVerdict("visual", ok, "matches_a_successful_end" if ok else "ends_elsewhere")


def consensus(
    verdicts: list[ChannelVerdict],
    rule: Literal["and", "majority", "weighted"] = "and",
    weights: dict[str, float] | None = None,
) -> bool | None:
    """A trajectory is correct when all channels agree (GUI-Owl §6.3), by majority, or by weighted vote
    (the weighted share of "correct" above one half; channels without a weight count 1).

    Abstaining channels do not vote; with no vote at all the consensus is None (undecided).
    """
    voting = [v for v in verdicts if v.success is not None]
    if not voting:
        return None
    votes = [bool(v.success) for v in voting]
    if rule == "and":
        return all(votes)
    if rule == "majority":
        return sum(votes) * 2 > len(votes)
    w = weights or {}
    total = sum(w.get(v.channel, 1.0) for v in voting)
    return total > 0 and sum(w.get(v.channel, 1.0) for v in voting if v.success) * 2 > total
