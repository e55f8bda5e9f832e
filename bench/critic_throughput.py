"""Model-critic requests per second through the gateway, against the concurrency bound.

The scripted server (its own process) answers each request after 200 ms; with concurrency C the
bound is C / 0.2 s. Each request is the episode judge's (`critics.llm.LLMEpisodeJudge`) for one
evaluation episode: its 1080x2400 screenshots, each pre-action one with its point marked, and the
last screen. Usage: python -m bench.critic_throughput [--judgments 640 --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from bench.common import scripted_server, table, timed
from bench.evalset import build_eval_set
from critics.llm import LLMEpisodeJudge
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from trajforge.appspec import builtin_app_names, load_app
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

ANSWER = json.dumps(
    {
        "steps": [
            {"step": n, "analysis": "ok", "summary": "taps the next item", "label": "GOOD"}
            for n in range(1, 33)
        ],
        "analysis": "ends on the goal",
        "verdict": "correct",
    }
)


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--judgments 16 --concurrency 4 --latency-ms 5"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judgments", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    args = parser.parse_args()
    apps = [load_app(a) for a in builtin_app_names()]
    with tempfile.TemporaryDirectory() as tmp, scripted_server(args.latency_ms, ANSWER) as url:
        store = LocalObjectStore(Path(tmp))
        episodes = build_eval_set(apps, max(1, args.judgments // 24), (0.0,), store=store)
        episodes = [ep for ep in episodes if ep.steps][: args.judgments]

        async def run() -> int:
            gateway = LLMGateway(LLMSettings(base_url=url, model="critic", concurrency=args.concurrency))
            critic = LLMEpisodeJudge(gateway, lambda sha: store.get(blob_key(sha)))
            results = await asyncio.gather(*(critic.judge(ep.query, ep.steps) for ep in episodes))
            await gateway.aclose()
            return sum(r.verdict.label == "correct" for r in results)

        good, seconds = timed(lambda: asyncio.run(run()))
    steps = sum(len(ep.steps) for ep in episodes)
    bound = args.concurrency / (args.latency_ms / 1000)
    rate = len(episodes) / seconds  # one request per episode of at most 8 steps
    title = (
        f"episode judge through the gateway: {len(episodes)} episodes ({steps} steps), "
        f"{args.latency_ms:g} ms latency, concurrency {args.concurrency}"
    )
    print(
        table(
            title,
            ["requests/s", "bound C/L", "achieved", "steps judged/s", "parsed"],
            [
                [
                    f"{rate:,.1f}",
                    f"{bound:,.0f}",
                    f"{rate / bound:.0%}",
                    f"{steps / seconds:,.1f}",
                    f"{good}/{len(episodes)}",
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
