"""Gateway throughput against the scripted server: achieved calls/s vs concurrency/latency.

With latency L and concurrency C the ceiling is C/L calls/s (32 / 50 ms = 640/s). The
gateway's overhead (client, semaphore, JSON, cache writes) shows as the gap.
With `--images 2`, every request carries two 1080x2400 PNG screenshots, as a VLM policy's does.
Usage: python -m bench.bench_gateway [--calls N] [--latency-ms L] [--concurrency C] [--images K]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.common import list_screens, scripted_server, table, timed
from storage.db import create_db_engine, session_factory, upgrade
from storage.llm_cache import SqlResponseCache
from trajforge.chat import image_part
from trajforge.gateway import LLMGateway, ResponseCache
from trajforge.settings import LLMSettings

# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--calls 32 --latency-ms 5 --concurrency 4"


def run(
    url: str, calls: int, concurrency: int, cache: ResponseCache | None, tag: str, images: list[dict]
) -> float:
    settings = LLMSettings(base_url=url, model="bench", concurrency=concurrency, max_retries=0)

    async def go() -> None:
        gateway = LLMGateway(settings, cache)
        msgs = [
            [{"role": "user", "content": [{"type": "text", "text": f"{tag} call {i}"}, *images]}]
            for i in range(calls)
        ]
        await asyncio.gather(*(gateway.chat(m, stage="bench", json_mode=True) for m in msgs))
        await gateway.aclose()

    _, seconds = timed(lambda: asyncio.run(go()))
    return calls / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1280)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--images", type=int, default=0, help="1080x2400 screenshots per request")
    args = parser.parse_args()
    images = [image_part(png) for png in list_screens(args.images)]
    size_kb = sum(len(p["image_url"]["url"]) for p in images) / 1024
    bound = args.concurrency / (args.latency_ms / 1000)
    rows = []
    with scripted_server(args.latency_ms) as url:
        no_cache = run(url, args.calls, args.concurrency, None, "nocache", images)
        rows.append(["no cache", f"{no_cache:,.0f}", f"{bound:,.0f}", f"{no_cache / bound:.0%}"])
        with tempfile.TemporaryDirectory() as tmp:
            engine = create_db_engine(f"sqlite:///{Path(tmp) / 'bench.db'}")
            upgrade(engine)
            cache = SqlResponseCache(session_factory(engine))
            cold = run(url, args.calls, args.concurrency, cache, "cached", images)
            rows.append(["SQLite cache, cold", f"{cold:,.0f}", f"{bound:,.0f}", f"{cold / bound:.0%}"])
            warm = run(url, args.calls, args.concurrency, cache, "cached", images)
            rows.append(["SQLite cache, warm (rerun)", f"{warm:,.0f}", "-", f"{warm / bound:.1f}x bound"])
    print(
        table(
            f"gateway: {args.calls:,} calls, {args.latency_ms:g} ms latency, concurrency {args.concurrency}, "
            f"{args.images} screenshots per request ({size_kb:,.0f} KB of data URLs)",
            ["mode", "calls/s", "bound C/L", "achieved"],
            rows,
        )
    )
    print("the warm rerun is answered from the llm_call table: no request reaches the server\n")


if __name__ == "__main__":
    main()
