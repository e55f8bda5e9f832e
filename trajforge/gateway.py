"""The model gateway: every model call in the engine goes through `LLMGateway`.

It bounds concurrency, rate-limits, retries 429/5xx/timeouts with backoff, sends
images as data URLs, parses JSON mode while keeping the raw text, answers repeats
from a response cache keyed by the request hash, and accounts tokens and cost per
stage. The cache is a protocol so the kernel does not depend on `storage`;
`storage.llm_cache.SqlResponseCache` keeps it in the database.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from trajforge.chat import Message
from trajforge.endpoints import charged_round, fit_images, stage_group
from trajforge.errors import LLMError, LLMRateLimited, LLMRefused, LLMTimeout
from trajforge.json_output import parse_json_output
from trajforge.ledger import CachedCall, FailedCall, ResponseCache
from trajforge.llm_settings import LLMSettings
from trajforge.logs import redact
from trajforge.stopping import check_stop

if TYPE_CHECKING:  # imported where a request is sent: `openai` alone takes 2.5 s of a command's start
    import openai

__all__ = ["CachedCall", "FailedCall", "ResponseCache"]  # and the gateway below
log = logging.getLogger("trajforge.gateway")
T = TypeVar("T")


@dataclass(frozen=True)
class LLMResult:
    """A model answer. `data`/`json_error` are set in JSON mode; `text` is always the raw output."""

    text: str
    request_hash: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cached: bool
    attempts: int
    data: Any = None
    json_error: str | None = None


@dataclass
class StageUsage:
    calls: int = 0
    failed: int = 0  # requests that failed after their retries (recorded in `llm_failure`)
    cached: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass
class RateLimiter:
    """Spaces request starts at least 1/rps apart across all callers (rps 0 disables)."""

    rps: float
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    _next: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def wait(self) -> None:
        if self.rps <= 0:
            return
        async with self._lock:
            now = self.clock()
            start = max(now, self._next)
            self._next = start + 1.0 / self.rps
        if start > now:
            await self.sleep(start - now)


@dataclass
class _Route:
    """One stage group's endpoint: its settings, client and in-flight bound."""

    settings: LLMSettings
    client: openai.AsyncOpenAI
    semaphore: asyncio.Semaphore


def request_hash(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LLMGateway:
    """Async access to the OpenAI-compatible endpoints of the stage groups (`trajforge.endpoints`).

    Args:
        settings: endpoints, limits, retry and price settings (shared, and per stage group).
        cache: where responses are cached; None disables caching.
        client: an AsyncOpenAI client to use instead of building one (tests, proxies).
        sleep: the backoff sleeper (tests pass a fake clock).
    """

    def __init__(
        self,
        settings: LLMSettings,
        cache: ResponseCache | None = None,
        *,
        client: openai.AsyncOpenAI | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if client is None and settings.offline:
            raise LLMError(
                "no LLM endpoint configured; set TRAJFORGE_LLM_BASE_URL (offline stages need no gateway)"
            )
        self.settings = settings
        self.cache = cache
        self._own_client = client is None  # ours: rebuilt after `aclose`, for the next event loop
        self._client = client
        self._routes: dict[str, _Route] = {}
        self._sleep = sleep
        self._limiter = RateLimiter(settings.requests_per_second, sleep)
        self.usage: dict[str, StageUsage] = defaultdict(StageUsage)
        # Identical requests in flight share one call: the cache only helps once it has landed.
        self._inflight: dict[str, asyncio.Future[LLMResult]] = {}

    def stage_settings(self, stage: str) -> LLMSettings:
        """The settings `stage`'s calls run under (its group's endpoint, model and limits)."""
        return self.settings.for_group(stage_group(stage))

    def model_for(self, stage: str) -> str:
        return self.stage_settings(stage).model

    def max_images(self, stage: str) -> int | None:
        return self.stage_settings(stage).max_images

    def _route(self, stage: str) -> _Route:
        group = stage_group(stage)
        route = self._routes.get(group)
        if route is None:
            settings = self.settings.for_group(group)
            if self._client is None and settings.base_url is None:
                raise LLMError(
                    f"{stage}: no endpoint for the {group} stages; set llm.{group}.base_url or llm.base_url"
                )
            client = self._client or _new_client(settings)
            route = self._routes[group] = _Route(settings, client, asyncio.Semaphore(settings.concurrency))
        elif self._own_client and route.client.is_closed():  # closed at the end of an earlier loop
            route.client = _new_client(route.settings)
        return route

    async def chat(
        self,
        messages: list[Message],
        *,
        stage: str,
        model: str | None = None,
        json_mode: bool = False,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        round_id: int | None = None,
        seed: int | None = None,
        top_p: float | None = None,
    ) -> LLMResult:
        """One chat completion, from the cache when this exact request was paid for before. `seed` is
        sent and keyed: K rollouts of one prompt at temperature > 0 are K requests; a rerun hits the cache.

        Raises:
            LLMRateLimited / LLMTimeout: still failing after `max_retries` retries.
            LLMError: any other refusal (4xx) or a response with no choices.
        """
        route = self._route(stage)
        params: dict[str, Any] = {
            "model": model or route.settings.model,
            "messages": fit_images(messages, route.settings.max_images),
            "temperature": temperature,
            "max_tokens": route.settings.max_tokens if max_tokens is None else max_tokens,  # llm.max_tokens
            "response_format": {"type": "json_object"} if json_mode else None,
            "seed": seed,
            "top_p": top_p,
        }
        params = {k: v for k, v in params.items() if v is not None}
        key = request_hash(params)
        usage = self.usage[stage]
        hit = self.cache.get(key) if self.cache is not None else None
        known = hit.response_text if hit is not None else None
        if known is None and key in self._inflight:
            known = (await asyncio.shield(self._inflight[key])).text
        if known is not None:
            usage.calls += 1
            usage.cached += 1
            return self._result(known, key, 0, 0, 0.0, True, 0, json_mode)

        future: asyncio.Future[LLMResult] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            charged = round_id if round_id is not None else charged_round()
            result = await self._call(params, key, stage, json_mode, charged, route)
        except BaseException as exc:
            shared_exc = (
                exc if isinstance(exc, Exception) else LLMError(f"{stage}: shared request was cancelled")
            )
            future.set_exception(shared_exc)
            future.exception()  # mark retrieved: only waiters re-raise it
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._inflight[key]

    async def _call(
        self,
        params: dict[str, Any],
        key: str,
        stage: str,
        json_mode: bool,
        round_id: int | None,
        route: _Route,
    ) -> LLMResult:
        """Pay for one request: limits, retries, accounting, cache write."""
        model = params["model"]
        usage = self.usage[stage]
        async with route.semaphore:
            await self._limiter.wait()
            started = time.monotonic()
            try:
                response, attempts = await self._with_retries(params, stage, route)
            except LLMError as exc:
                usage.failed += 1
                if self.cache is not None:
                    self.cache.fail(
                        FailedCall(
                            key, stage, model, exc.reason, exc.status, str(exc), exc.attempts, round_id
                        )
                    )
                raise
        latency_ms = int((time.monotonic() - started) * 1000)
        text = response.choices[0].message.content or ""
        prompt = response.usage.prompt_tokens if response.usage else 0
        completion = response.usage.completion_tokens if response.usage else 0
        price = route.settings
        cost = (prompt * price.prompt_usd_per_1k + completion * price.completion_usd_per_1k) / 1000
        usage.calls += 1
        usage.retries += attempts - 1
        usage.prompt_tokens += prompt
        usage.completion_tokens += completion
        usage.cost_usd += cost
        if self.cache is not None:
            self.cache.put(
                CachedCall(key, stage, model, text, prompt, completion, cost, latency_ms, attempts, round_id)
            )
        return self._result(text, key, prompt, completion, cost, False, attempts, json_mode)

    @staticmethod
    def _result(
        text: str,
        key: str,
        prompt: int,
        completion: int,
        cost: float,
        cached: bool,
        attempts: int,
        json_mode: bool,
    ) -> LLMResult:
        data, error = parse_json_output(text) if json_mode else (None, None)
        return LLMResult(text, key, prompt, completion, cost, cached, attempts, data, error)

    async def _with_retries(self, params: dict[str, Any], stage: str, route: _Route) -> tuple[Any, int]:
        import openai

        attempt = 0
        retry_after: float | None
        final: type[LLMError]
        status: int | None
        while True:
            attempt += 1
            check_stop()  # a model request is a step boundary
            try:
                response = await route.client.chat.completions.create(**params)
                if getattr(response, "choices", None):
                    return response, attempt
                # a 200 with no choices (an overloaded server's empty answer): a fault, retried
                error: Exception = LLMError(f"endpoint returned no choices for model {params['model']!r}")
                retry_after, final, status = None, LLMError, 200
            except openai.RateLimitError as exc:
                error = exc
                retry_after = _retry_after(exc.response)
                final = LLMRateLimited
                status = exc.status_code
            except openai.APITimeoutError as exc:
                error, retry_after, final, status = exc, None, LLMTimeout, None
            except openai.APIStatusError as exc:
                if exc.status_code < 500:
                    raise LLMRefused(
                        f"{stage}: endpoint refused the request ({exc.status_code}): {exc.message}; "
                        "the same request fails again (not retried): change the request or the endpoint",
                        status=exc.status_code,
                        attempts=attempt,
                    ) from exc
                error, retry_after, final, status = exc, None, LLMError, exc.status_code
            except openai.APIConnectionError as exc:
                error, retry_after, final, status = exc, None, LLMError, None
            except (json.JSONDecodeError, openai.APIResponseValidationError) as exc:
                # a proxy's error page or a broken server: a server fault like a 5xx, retried
                error = LLMError(f"the body is not a chat completion ({str(exc).splitlines()[0]})")
                retry_after, final, status = None, LLMError, 200
            if attempt > self.settings.max_retries:
                raise final(
                    f"{stage}: {type(error).__name__} after {attempt} attempts against "
                    f"{redact(str(route.settings.base_url))}: {error}",
                    status=status,
                    attempts=attempt,
                ) from error
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            # the log file's (`evolve`), not the terminal's: a faulty endpoint's retries once flooded it
            log.info("%s: %s, retry %d in %.2fs", stage, type(error).__name__, attempt, delay)
            await self._sleep(delay)

    def _backoff(self, attempt: int) -> float:
        base = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)  # full jitter would allow ~0 waits

    def chat_sync(self, messages: list[Message], **kwargs: Any) -> LLMResult:
        """`chat` for synchronous callers (not from inside a running event loop)."""
        return asyncio.run(self.chat(messages, **kwargs))

    async def aclose(self) -> None:
        clients = [r.client for r in self._routes.values()] + ([self._client] if self._client else [])
        for client in {id(c): c for c in clients}.values():
            await client.close()


def _new_client(settings: LLMSettings) -> openai.AsyncOpenAI:
    import openai

    return openai.AsyncOpenAI(
        base_url=settings.base_url,
        api_key=settings.api_key.get_secret_value(),
        max_retries=0,  # retries are ours: counted, logged and bounded per stage
        timeout=settings.timeout_s,
    )


async def closing(gateway: LLMGateway, work: Awaitable[T]) -> T:
    """Await `work`, then close the gateway's client on the same event loop (a client left for
    the garbage collector fails later with "Event loop is closed")."""
    try:
        return await work
    finally:
        await gateway.aclose()


def _retry_after(response: Any) -> float | None:
    value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        return min(float(value), 60.0) if value is not None else None
    except ValueError:
        return None
