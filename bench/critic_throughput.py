"""Step-critic judgments per second through the gateway, against the concurrency bound.

The scripted server (its own process) answers each judgment after 200 ms; with concurrency
C the bound is C / 0.2 s. Each judgment sends two 1080x2400 screenshots (the pre-action one
with its point marked). Usage: python -m bench.critic_throughput [--judgments 640 --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys

from bench.common import table, timed
from critics.heuristic import StepView
from critics.llm import LLMStepCritic
from querygen.pipeline import generate_queries
from rollout.policies import NoisyOracle
from rollout.sim.env import SimEnv
from trajforge.actions import Screen, get_codec
from trajforge.appspec import builtin_app_names, load_app
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

ANSWER = json.dumps({"analysis": "ok", "summary": "taps the next item", "label": "GOOD"})


def step_views(n: int) -> tuple[list[tuple[object, StepView]], dict[str, bytes]]:
    apps = [load_app(a) for a in builtin_app_names()]
    env = SimEnv(apps)
    frames: dict[str, bytes] = {}
    views: list[tuple[object, StepView]] = []
    for query in generate_queries(load_app("takeout"), max(1, n // 8), seed=0).kept:
        policy = NoisyOracle()
        policy.start(query, "bench")
        obs = env.reset(query)
        frames[obs.screenshot] = env.last_frame
        for _ in range(12):
            out = asyncio.run(policy.act(obs))
            action = get_codec(out.format).parse(out.text, Screen(obs.width, obs.height))
            after = env.step(action)
            frames[after.screenshot] = env.last_frame
            views.append(
                (
                    query,
                    StepView(
                        action.model_dump(mode="json", exclude_none=True),
                        None,
                        obs.screenshot,
                        after.screenshot,
                        obs.elements or [],
                        obs.width,
                        obs.height,
                    ),
                )
            )
            obs = after
            if action.kind == "terminate":
                break
    return views[:n], frames


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judgments", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    args = parser.parse_args()
    views, frames = step_views(args.judgments)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.scripted_llm",
            "--latency-ms",
            str(args.latency_ms),
            "--content",
            ANSWER,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()

        async def run() -> int:
            gateway = LLMGateway(LLMSettings(base_url=url, model="critic", concurrency=args.concurrency))
            critic = LLMStepCritic(gateway, frames.__getitem__)
            results = await asyncio.gather(*(critic.judge(q, v, []) for q, v in views))  # type: ignore[arg-type]
            await gateway.aclose()
            return sum(r.label == "GOOD" for r in results)

        good, seconds = timed(lambda: asyncio.run(run()))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    bound = args.concurrency / (args.latency_ms / 1000)
    rate = len(views) / seconds
    print(
        table(
            f"step critic through the gateway: {len(views)} judgments, {args.latency_ms:g} ms latency, "
            f"concurrency {args.concurrency}",
            ["judgments/s", "bound C/L", "achieved", "parsed"],
            [[f"{rate:,.1f}", f"{bound:,.0f}", f"{rate / bound:.0%}", f"{good}/{len(views)}"]],
        )
    )


if __name__ == "__main__":
    main()
