"""What the gateway keeps of each request: a paid answer (`CachedCall`), a failure after its
retries (`FailedCall`), and the store both go to (`ResponseCache`; `storage.llm_cache` keeps it in
the database), so a rerun pays for nothing twice and retries only what failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CachedCall:
    """A stored response, and what it cost when it was paid for."""

    request_hash: str
    stage: str
    model: str
    response_text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_ms: int
    attempts: int
    round_id: int | None = None


@dataclass(frozen=True)
class FailedCall:
    """A request that failed after its retries: `reason` is the error's reason code."""

    request_hash: str
    stage: str
    model: str
    reason: str
    status: int | None
    detail: str
    attempts: int
    round_id: int | None = None


class ResponseCache(Protocol):
    def get(self, request_hash: str) -> CachedCall | None: ...

    def put(self, call: CachedCall) -> None:
        """Store once; a second put of the same hash is ignored (and clears its recorded failure)."""
        ...

    def fail(self, call: FailedCall) -> None:
        """Record a failed request (the latest failure of a hash stands), so a rerun can count and
        retry exactly what failed."""
        ...
