"""A labelled evaluation set from the simulated world, where the truth is known exactly.

Episodes come from the noisy oracle at several error rates. A step's true label comes from
the simulator's hidden state, which the critics never see: GOOD when the device moved
forward along the ground-truth path, HARMFUL when it left the path (or moved back along
it, or stopped early), NEUTRAL otherwise. A trajectory's true label is the verifier's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from critics.heuristic import ChannelVerdict, VisualTrajectoryCritic, consensus
from querygen.pipeline import generate_queries
from rollout.policies import NoisyOracle, OracleNoise
from rollout.sim.env import SimEnv
from storage.objectstore import ObjectStore
from trajforge.actions import ActionKind, Screen, get_codec
from trajforge.appspec import AppSpec
from trajforge.domain import Label, Query, StepView, goal_key
from trajforge.errors import ParseError
from trajforge.world.device import SimDevice
from trajforge.world.model import Move
from trajforge.world.oracle import actions_for
from trajforge.world.route_check import RouteGoalCheck, RouteStepCheck

State = tuple[str | None, str, dict[str, str]]


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "1"


@dataclass
class EvalEpisode:
    query: Query
    steps: list[StepView]
    true_steps: list[Label]
    true_success: bool
    noise: float


def _path_states(spec: AppSpec, query: Query) -> list[State]:
    """The state after each ground-truth move: (app, screen, slot values the moves so far set)."""
    device = SimDevice([spec])
    states: list[State] = [(None, device.state.screen, {})]
    required: dict[str, str] = {}
    for action in actions_for(device, spec.name, [Move.from_json(m) for m in query.path]):
        before = (device.state.app, device.state.screen, device.slot_values())
        device.act(action)
        after = (device.state.app, device.state.screen, device.slot_values())
        required.update({k: v for k, v in after[2].items() if before[2].get(k) != v})
        # typing sets the slot, but the move is complete only when its enter submits it
        if after != before and action.kind != ActionKind.TYPE:
            states.append((after[0], after[1], dict(required)))
    return states


def _position(states: list[State], device: SimDevice) -> int | None:
    app, screen, values = device.state.app, device.state.screen, device.slot_values()
    for k in range(len(states) - 1, -1, -1):
        s_app, s_screen, required = states[k]
        if s_app == app and s_screen == screen and all(values.get(key) == v for key, v in required.items()):
            return k
    return None


def build_eval_set(
    apps: list[AppSpec],
    per_app: int,
    noise_levels: tuple[float, ...],
    seed: int = 0,
    max_steps: int = 30,
    store: ObjectStore | None = None,
) -> list[EvalEpisode]:
    """Episodes of the noisy oracle with exact step and trajectory labels (frames into `store`, if given)."""
    out: list[EvalEpisode] = []
    env = SimEnv(apps, store=store)
    for spec in apps:
        queries = generate_queries(spec, per_app, seed=seed).kept
        for query in queries:
            states = _path_states(spec, query)
            for level in noise_levels:
                noise = OracleNoise(
                    mis_tap=level,
                    wrong_value=level,
                    wander=level / 2,
                    premature_terminate=level / 4,
                    malformed=level,
                )
                out.append(_episode(env, query, states, NoisyOracle(noise), level, max_steps))
    return out


def _episode(
    env: SimEnv, query: Query, states: list[State], policy: NoisyOracle, level: float, max_steps: int
) -> EvalEpisode:
    policy.start(query, seed=f"eval:{query.uid}:{level}")
    obs = env.reset(query)
    steps: list[StepView] = []
    truth: list[Label] = []
    status = None
    for _ in range(max_steps):
        out = asyncio.run(policy.act(obs))
        before_pos = _position(states, env.device)
        try:
            action = get_codec(out.format).parse(out.text, Screen(obs.width, obs.height))
        except ParseError as exc:  # a cut-off output: recorded, nothing happens
            steps.append(
                StepView(
                    None,
                    exc.reason,
                    obs.screenshot,
                    obs.screenshot,
                    obs.elements or [],
                    obs.width,
                    obs.height,
                )
            )
            truth.append("NEUTRAL")
            continue
        after = env.step(action)
        after_pos = _position(states, env.device)
        steps.append(StepView.observed(action, obs, after))
        if action.kind == ActionKind.TERMINATE:
            status = action.status
            at_end = before_pos == len(states) - 1
            truth.append("GOOD" if at_end and status == "success" else "HARMFUL")
            break
        truth.append(_label(before_pos, after_pos))
        obs = after
    return EvalEpisode(query, steps, truth, env.verify().success and status == "success", level)


def _label(before: int | None, after: int | None) -> Label:
    if before is None:
        return "GOOD" if after is not None else "NEUTRAL"
    if after is None or after < before:
        return "HARMFUL"
    return "GOOD" if after > before else "NEUTRAL"


@dataclass
class EvalReport:
    episodes: int
    trajectory_accuracy: float
    channel_accuracy: dict[str, float]
    step_accuracy: float
    step_confusion: Counter[tuple[str, str]]  # (truth, critic)
    by_noise: dict[float, float]

    def render(self) -> str:
        lines = [
            f"{self.episodes} episodes; route check + visual channel (AND): {self.trajectory_accuracy:.1%}",
            "per channel: " + ", ".join(f"{k} {v:.1%}" for k, v in self.channel_accuracy.items()),
            "by noise level: " + ", ".join(f"{k:g}: {v:.1%}" for k, v in sorted(self.by_noise.items())),
            f"step-label accuracy: {self.step_accuracy:.1%}",
            "step confusion (truth -> route check):",
        ]
        for truth in ("GOOD", "NEUTRAL", "HARMFUL"):
            row = ", ".join(f"{c} {self.step_confusion[(truth, c)]}" for c in ("GOOD", "NEUTRAL", "HARMFUL"))
            lines.append(f"  {truth:8} {row}")
        return "\n".join(lines)


def evaluate(apps: list[AppSpec], episodes: list[EvalEpisode]) -> EvalReport:
    """The spec's route check (a programmatic check: it reads the spec's ids) and the visual channel on
    the set; the visual channel's references are the set's true successes of other queries."""
    references: dict[str, dict[str, set[str]]] = {}
    for ep in episodes:
        if ep.true_success and ep.steps:
            references.setdefault(goal_key(ep.query.goal), {}).setdefault(ep.steps[-1].after, set()).add(
                ep.query.uid
            )
    step_critic, textual, visual = (
        RouteStepCheck(apps),
        RouteGoalCheck(),
        VisualTrajectoryCritic(references),
    )
    right, voted = Counter[str](), Counter[str]()
    by_noise: dict[float, list[bool]] = {}
    confusion: Counter[tuple[str, str]] = Counter()
    for ep in episodes:
        trace = step_critic.follow(ep.query, ep.steps)
        goal = textual.judge(trace, ep.steps)
        channels = [ChannelVerdict("route_goal", goal.success, goal.reason), visual.judge(ep.query, ep.steps)]
        ok = bool(consensus(channels)) == ep.true_success
        right["consensus"] += ok
        for ch in (c for c in channels if c.success is not None):  # a channel's accuracy where it voted
            voted[ch.channel] += 1
            right[ch.channel] += ch.success == ep.true_success
        by_noise.setdefault(ep.noise, []).append(ok)
        for truth, verdict in zip(ep.true_steps, trace.verdicts, strict=True):
            confusion[(truth, verdict.label)] += 1
    n = max(len(episodes), 1)
    steps = sum(confusion.values())
    return EvalReport(
        episodes=len(episodes),
        trajectory_accuracy=right["consensus"] / n,
        channel_accuracy={c: right[c] / max(voted[c], 1) for c in ("route_goal", "visual")},
        step_accuracy=sum(v for (t, c), v in confusion.items() if t == c) / max(steps, 1),
        step_confusion=confusion,
        by_noise={k: sum(v) / len(v) for k, v in by_noise.items()},
    )


def main() -> None:
    """`python -m critics.evalset [PER_APP]`: build the set and print the offline critics' report."""
    import sys

    from trajforge.appspec import builtin_app_names, load_app

    apps = [load_app(n) for n in builtin_app_names()]
    per_app = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    episodes = build_eval_set(apps, per_app, (0.0, 0.05, 0.1, 0.2))
    print(evaluate(apps, episodes).render())


if __name__ == "__main__":
    main()
