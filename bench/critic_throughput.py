"""Step-critic judgments per second through the gateway, against the concurrency bound.

The scripted server (its own process) answers each judgment after 200 ms; with concurrency
C the bound is C / 0.2 s. Each judgment sends two 1080x2400 screenshots (the pre-action one
with its point marked). Usage: python -m bench.critic_throughput [--judgments 640 --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from bench.common import scripted_server, table, timed
from bench.evalset import build_eval_set
from critics.llm import LLMStepCritic
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from trajforge.appspec import builtin_app_names, load_app
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

ANSWER = json.dumps({"analysis": "ok", "summary": "taps the next item", "label": "GOOD"})


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
        steps = [(ep.query, view) for ep in episodes for view in ep.steps][: args.judgments]

        async def run() -> int:
            gateway = LLMGateway(LLMSettings(base_url=url, model="critic", concurrency=args.concurrency))
            critic = LLMStepCritic(gateway, lambda sha: store.get(blob_key(sha)))
            results = await asyncio.gather(*(critic.judge(q, v, []) for q, v in steps))
            await gateway.aclose()
            return sum(r.label == "GOOD" for r in results)

        good, seconds = timed(lambda: asyncio.run(run()))
    bound = args.concurrency / (args.latency_ms / 1000)
    rate = len(steps) / seconds
    title = (
        f"step critic through the gateway: {len(steps)} judgments, {args.latency_ms:g} ms latency, "
        f"concurrency {args.concurrency}"
    )
    print(
        table(
            title,
            ["judgments/s", "bound C/L", "achieved", "parsed"],
            [[f"{rate:,.1f}", f"{bound:,.0f}", f"{rate / bound:.0%}", f"{good}/{len(steps)}"]],
        )
    )


if __name__ == "__main__":
    main()
