"""A dataset version's reproducibility card: how its rows were made, pinned when it is sealed.

Reproducing a published result is the most common request in the GUI-agent families' trackers,
and the usual cause of a gap is a prompt, resize or coordinate detail. So the manifest's lineage
records (`Lineage.made_with`), beside the rounds, policies, critics and sampling it already holds:

- trajforge's version;
- each round's seed and the served model name of each stage group that called one (`llm_call`);
- each model family whose requests made episodes: its prompt source and version, the coordinate
  space it answers in (for the rounds' own screen sizes) and how many screenshots a request carries.

`trajforge datasets card N` prints it with the rest of the lineage; an export copies it into its
`.trajforge-export.json`, with what the export itself chose (family, action format, the image
sizes its coordinates assume, the trainer it wrote for).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from storage.datasets import Lineage, Manifest, PolicyRef
from storage.models import Episode, Judgment, LLMCall, Policy, Round, Step
from storage.rounds import sampling_by_round
from trajforge.actions import Screen
from trajforge.families import PROMPT_VERSION, get_family


def lineage(sessions: sessionmaker[Session], rounds: list[int]) -> Lineage:
    """Where the rows of `rounds` come from and how they were made, as a manifest seals it."""
    with sessions() as s:
        policies = s.execute(
            select(Round.number, Policy.name, Policy.version, Round.config_hash)
            .join(Policy, Policy.id == Round.policy_id)
            .where(Round.number.in_(rounds))
            .order_by(Round.number)
        ).all()
        critics = s.execute(
            select(Judgment.critic, Judgment.critic_version)
            .join(Episode, (Judgment.target == "episode") & (Judgment.target_id == Episode.id))
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number.in_(rounds))
            .distinct()
        ).all()
        sampling = sampling_by_round(sessions, rounds)
        pinned = made_with(s, rounds, sampling)
    return Lineage(
        rounds=rounds,
        policies=[PolicyRef(round=n, policy=name, version=v) for n, name, v, _ in policies],
        critics=sorted(f"{c}:{v}" for c, v in critics),
        sampling=sampling or None,  # manifests of offline rounds have no sampling key
        made_with=pinned,
    )


def trajforge_version() -> str:
    try:
        return version("trajforge")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def made_with(s: Session, rounds: list[int], sampling: list[dict[str, Any]]) -> dict[str, Any]:
    """What the card pins for `rounds` (see the module docstring); `sampling` is the lineage's."""
    seeds = dict(s.execute(select(Round.number, Round.seed).where(Round.number.in_(rounds))).tuples().all())
    served: dict[int, dict[str, set[str]]] = {}
    for number, stage, model in s.execute(
        select(Round.number, LLMCall.stage, LLMCall.model)
        .join(Round, Round.id == LLMCall.round_id)
        .where(Round.number.in_(rounds))
        .distinct()
    ).tuples():
        served.setdefault(number, {}).setdefault(stage, set()).add(model)
    sizes = sorted(
        s.execute(
            select(Step.width, Step.height)
            .join(Episode, Episode.id == Step.episode_id)
            .join(Round, Round.id == Episode.round_id)
            .where(Round.number.in_(rounds))
            .distinct()
        ).tuples()
    )
    names = sorted({str(entry["family"]).split(" (")[0] for entry in sampling if entry.get("family")})
    return {
        "trajforge": trajforge_version(),
        "rounds": [
            {
                "round": n,
                "seed": seeds.get(n),
                "models": {stage: sorted(models) for stage, models in sorted(served.get(n, {}).items())},
            }
            for n in rounds
        ],
        "families": [_family(name, sizes) for name in names],
    }


def _family(name: str, sizes: list[tuple[int, int]]) -> dict[str, Any]:
    family = get_family(name)
    spaces = {f"{w}x{h}": _size(family.coordinate_screen(w, h)) for w, h in sizes}
    return {
        "family": name,
        "prompt": f"{family.source} ({PROMPT_VERSION})",
        "action_format": family.action_format,
        "answers_with": list(family.asks),
        "coordinate_space": spaces,  # screenshot size -> the pixel space its coordinates live in
        "images_per_request": family.images,
    }


def _size(screen: Screen) -> str:
    return f"{screen.width}x{screen.height}"


def card_lines(man: Manifest) -> list[str]:
    """The card as `trajforge datasets card` prints it."""
    lineage = man.lineage
    lines = [
        f"{man.dataset} v{man.version}: {man.rows} rows; manifest config hash {man.config_hash[:16]}",
        "policies: " + ", ".join(f"round {p.round}: {p.policy}@{p.version}" for p in lineage.policies),
        "critics: " + (", ".join(lineage.critics) or "none"),
    ]
    for entry in lineage.sampling or []:
        family = f", family {entry['family']}" if entry.get("family") else ""
        lines.append(
            f"sampling: round {entry['round']}: temperature {entry['temperature']}, top_p {entry['top_p']}"
            f"{family} ({entry['episodes']} episodes)"
        )
    made = lineage.made_with
    if made is None:
        lines.append("made with: not recorded (the version was sealed before trajforge pinned it)")
        return lines
    lines.append(f"trajforge: {made['trajforge']}")
    for entry in made["rounds"]:
        models = "; ".join(f"{stage} {', '.join(names)}" for stage, names in entry["models"].items())
        lines.append(f"round {entry['round']}: seed {entry['seed']}; served models: {models or 'none'}")
    for fam in made["families"]:
        spaces = ", ".join(f"{raw} -> {space}" for raw, space in fam["coordinate_space"].items())
        lines.append(
            f"family {fam['family']}: prompt {fam['prompt']}; answers in {fam['action_format']}"
            f" with {', '.join(fam['answers_with']) or 'the action alone'}; coordinates {spaces}; "
            f"at most {fam['images_per_request']} screenshots a request"
        )
    return lines
