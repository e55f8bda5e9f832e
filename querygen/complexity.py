"""Complexity tiers of a query (Step-GUI §2.1.3) and the tier mix new queries are sampled with.

Step-GUI scores tasks into simple localization, functional understanding and intent
alignment. Offline, the tier is read from how much of its route the instruction names:
a move is named when the instruction says the value it picks or the words of the control
it taps (`{slot}` in a label filled with the value).

- `localization`: every move of the route is named; each step is finding a named control.
- `functional`: at least half of the moves are named; the rest is knowing where a function
  lives (which menu holds "Contacts access").
- `intent`: fewer than half are named; the task states a goal and the route must be known.

The tiers are a prior. Whether they track what the policy finds hard is measured, not
assumed: each round reports its pass rate per tier (`rounds.json`, `tiers`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trajforge.appspec import AppSpec
from trajforge.domain import TIERS, mix_problem
from trajforge.errors import ConfigError
from trajforge.world.model import Move

_WORD = re.compile(r"[^\W\d_]{3,}|\d+")
_PLACEHOLDER = re.compile(r"\{[^}]*\}")


def _named(label: str, value: str | None, instruction: str) -> bool:
    said = instruction.casefold()
    if value and value.casefold() in said:
        return True
    text = _PLACEHOLDER.sub(value or "", label).strip(" :：").casefold()
    if not text:
        return False
    if text in said:
        return True
    words = _WORD.findall(text)
    return bool(words) and all(re.search(rf"\b{re.escape(w)}", said) for w in words)


def complexity(spec: AppSpec, instruction: str, path: Sequence[Mapping[str, Any]]) -> str:
    """The query's tier (see the module docstring)."""
    moves = [Move.from_json(dict(m)) for m in path]
    if not moves:
        return "localization"
    named = sum(_named(spec.widget(m.screen, m.widget).label, m.value, instruction) for m in moves)
    if named == len(moves):
        return "localization"
    return "functional" if 2 * named >= len(moves) else "intent"


def check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """The mix as shares summing to 1.

    Raises:
        ConfigError: an unknown tier, a negative share, or no positive share.
    """
    problem = mix_problem(mix)
    if problem:
        raise ConfigError(problem)
    total = sum(mix.values())
    return {t: mix[t] / total for t in TIERS if mix.get(t, 0) > 0}


def parse_mix(text: str) -> dict[str, float]:
    """`localization=0.5,functional=0.3,intent=0.2` as a mix (checked by `check_mix`).

    Raises:
        ConfigError: a part that is not `tier=share` with a number.
    """
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        tier, _, share = part.partition("=")
        try:
            mix[tier.strip()] = float(share)
        except ValueError:
            raise ConfigError(
                f"tier mix part {part!r} is not tier=share; write e.g. "
                "localization=0.5,functional=0.3,intent=0.2"
            ) from None
    return mix


def quotas(n: int, mix: Mapping[str, float]) -> dict[str, int]:
    """`n` queries split by the mix (largest remainder; ties in tier order)."""
    shares = check_mix(mix)
    raw = {t: n * s for t, s in shares.items()}
    out = {t: int(v) for t, v in raw.items()}
    for t in sorted(raw, key=lambda t: (out[t] - raw[t], TIERS.index(t)))[: n - sum(out.values())]:
        out[t] += 1
    return {t: out.get(t, 0) for t in TIERS}
