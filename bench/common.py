"""Helpers shared by the benchmarks: timing, tables, and the services they need."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import text

from critics.trust import wilson
from storage.db import create_db_engine

T = TypeVar("T")
PG_ADMIN_URL = os.environ.get("TRAJFORGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def scripted_server(latency_ms: float, content: str | None = None) -> Iterator[str]:
    """The scripted OpenAI-compatible endpoint in its own process (so it does not share our GIL)."""
    cmd = [sys.executable, "-m", "tests.support.scripted_llm", "--latency-ms", str(latency_ms)]
    if content is not None:
        cmd += ["--content", content]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def worker_counts(text: str) -> list[int]:
    """`--workers 1,2,4`: the worker (device, browser, display) counts a bench runs at, in order."""
    counts = [int(n) for n in text.split(",")]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--workers {text!r}: give worker counts of at least 1, comma-separated (1,2,4)")
    return counts


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def rate_shown(right: int, n: int) -> str:
    """A rate with its Wilson 95% interval and count ("undefined" when there is nothing to count)."""
    if not n:
        return "undefined"
    lo, hi = wilson(right, n) or [0.0, 0.0]
    return f"{right / n:.1%} [{lo:.0%}, {hi:.0%}] of {n}"


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    body = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([f"== {title}", line, "-" * len(line), *body, ""])


@contextmanager
def scratch_postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL database, or None when no server answers."""
    try:
        admin = create_db_engine(PG_ADMIN_URL, connect_timeout_s=3).execution_options(
            isolation_level="AUTOCOMMIT"
        )
        name = f"trajforge_bench_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        print(f"(PostgreSQL not reachable at {PG_ADMIN_URL}: {type(exc).__name__}; skipped)")
        yield None
        return
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def list_screens(n: int, width: int = 1080, height: int = 2400) -> list[bytes]:
    """`n` different phone-sized PNG screenshots of a list screen (rows of text-like bars)."""
    import io

    from PIL import Image, ImageDraw

    out = []
    for i in range(n):
        image = Image.new("RGB", (width, height), (245, 245, 245))
        draw = ImageDraw.Draw(image)
        for row in range(24):
            right = 300 + 29 * ((row * 7 + i) % 24)
            draw.rectangle((40, 100 * row + 20, right, 100 * row + 80), fill=(60, 90, 140))
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        out.append(buf.getvalue())
    return out
