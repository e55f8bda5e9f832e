"""The model gateway against the scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy.orm import Session, sessionmaker

from storage.llm_cache import SqlResponseCache, usage_by_stage
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from trajforge.chat import image_part, text_part
from trajforge.errors import LLMError, LLMRateLimited, LLMRefused, LLMTimeout
from trajforge.gateway import LLMGateway, RateLimiter, closing, parse_json_output
from trajforge.settings import LLMSettings

USER = [{"role": "user", "content": "hello"}]


async def _no_sleep(_: float) -> None:
    return None


def gateway(llm: ScriptedLLM, cache=None, **overrides) -> LLMGateway:
    settings = LLMSettings(
        base_url=llm.url, api_key="sk-test", model="scripted", backoff_base_s=0.01, **overrides
    )
    return LLMGateway(settings, cache, sleep=_no_sleep)


async def test_plain_call_and_usage(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.enqueue(Reply(content="hi there", prompt_tokens=12, completion_tokens=3))
    gw = gateway(scripted_llm, prompt_usd_per_1k=1.0, completion_usd_per_1k=2.0)
    result = await gw.chat(USER, stage="critic")
    assert (result.text, result.cached, result.attempts) == ("hi there", False, 1)
    assert result.cost_usd == pytest.approx((12 * 1.0 + 3 * 2.0) / 1000)
    assert gw.usage["critic"].prompt_tokens == 12 and gw.usage["critic"].calls == 1
    assert scripted_llm.requests[0].body["model"] == "scripted"


async def test_a_stage_without_a_budget_gets_the_endpoints(scripted_llm: ScriptedLLM) -> None:
    """`llm.max_tokens` bounds the calls whose stage sets no budget (critics, CSRS, thoughts);
    a stage's own budget wins, and without either none is sent (the server's default)."""
    await gateway(scripted_llm, max_tokens=64).chat(USER, stage="critic")
    await gateway(scripted_llm, max_tokens=64).chat(USER, stage="policy", max_tokens=512)
    await gateway(scripted_llm).chat(USER, stage="critic")
    sent = [r.body.get("max_tokens") for r in scripted_llm.requests]
    assert sent == [64, 512, None]


async def test_images_travel_as_data_urls(scripted_llm: ScriptedLLM) -> None:
    gw = gateway(scripted_llm)
    content = [text_part("compare"), image_part(b"\x89PNG one"), image_part(b"\x89PNG two")]
    await gw.chat([{"role": "user", "content": content}], stage="step_critic")
    assert scripted_llm.requests[0].images == 2
    url = scripted_llm.requests[0].body["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    ("content", "data", "error"),
    [
        ('{"label": "GOOD"}', {"label": "GOOD"}, None),
        ('```json\n{"label": "HARMFUL"}\n```', {"label": "HARMFUL"}, None),
        ('{"label": "GOOD"', None, "invalid_json: Expecting ',' delimiter at char 16"),
        ("", None, "empty_output"),
        # what real endpoints send: reasoning first, prose around, fences in the middle
        ('<think>The tap hit "Save" {maybe}.</think>\n{"label": "GOOD"}', {"label": "GOOD"}, None),
        ('The step saved the form.</think>\n\n{"label": "GOOD"}', {"label": "GOOD"}, None),
        (
            'Looking at the screen, the toggle flipped.\n{"label": "NEUTRAL", "reason": "x"}',
            {"label": "NEUTRAL", "reason": "x"},
            None,
        ),
        (
            'Here is my verdict:\n```json\n{"label": "HARMFUL"}\n```\nHope this helps.',
            {"label": "HARMFUL"},
            None,
        ),
        (
            'First I considered {"label": "GOOD"} but no. Final: {"label": "HARMFUL"}',
            {"label": "HARMFUL"},
            None,
        ),
        ("Final answer: [1, 2]", [1, 2], None),
        ("<think>only thinking</think>", None, "empty_output"),
        ("no json here at all", None, "invalid_json: Expecting value at char 0"),
    ],
)
async def test_json_mode_keeps_raw_and_reason(scripted_llm: ScriptedLLM, content, data, error) -> None:
    scripted_llm.enqueue(Reply(content=content))
    result = await gateway(scripted_llm).chat(USER, stage="judge", json_mode=True)
    assert (result.data, result.json_error, result.text) == (data, error, content)
    assert scripted_llm.requests[0].body["response_format"] == {"type": "json_object"}


async def test_retries_429_and_5xx_then_succeeds(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.enqueue(
        Reply(status=429, headers={"retry-after": "0"}),
        Reply(status=500),
        Reply(status=503),
        Reply(content="finally"),
    )
    gw = gateway(scripted_llm)
    result = await gw.chat(USER, stage="policy")
    assert (result.text, result.attempts) == ("finally", 4)
    assert gw.usage["policy"].retries == 3
    assert len(scripted_llm.requests) == 4


async def test_gives_up_after_max_retries(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.default = Reply(status=429)
    with pytest.raises(LLMRateLimited, match="policy: RateLimitError after 3 attempts"):
        await gateway(scripted_llm, max_retries=2).chat(USER, stage="policy")
    assert len(scripted_llm.requests) == 3


async def test_timeouts_retry_then_raise(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.default = Reply(delay_s=1.0)
    with pytest.raises(LLMTimeout, match="APITimeoutError after 2 attempts"):
        await gateway(scripted_llm, max_retries=1, timeout_s=0.2).chat(USER, stage="policy")


async def test_client_errors_are_not_retried(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.enqueue(Reply(status=400))
    with pytest.raises(
        LLMRefused, match=r"endpoint refused the request \(400\).*fails again \(not retried\)"
    ):
        await gateway(scripted_llm).chat(USER, stage="policy")
    assert len(scripted_llm.requests) == 1


async def test_bad_image_is_refused_not_retried(scripted_llm: ScriptedLLM) -> None:
    bad = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]
    with pytest.raises(LLMError, match="400"):
        await gateway(scripted_llm).chat([{"role": "user", "content": bad}], stage="x")


async def test_concurrency_is_bounded(scripted_llm: ScriptedLLM) -> None:
    in_flight, peak, lock = 0, 0, threading.Lock()

    def responder(_: Recorded) -> Reply:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        import time

        time.sleep(0.05)
        with lock:
            in_flight -= 1
        return Reply(content="ok")

    scripted_llm.responder = responder
    gw = gateway(scripted_llm, concurrency=4)
    await asyncio.gather(*(gw.chat([{"role": "user", "content": f"q{i}"}], stage="s") for i in range(20)))
    assert len(scripted_llm.requests) == 20
    assert peak == 4


async def test_cache_means_a_rerun_never_pays_twice(
    scripted_llm: ScriptedLLM, sessions: sessionmaker[Session]
) -> None:
    scripted_llm.enqueue(Reply(content='{"a": 1}', prompt_tokens=7, completion_tokens=2))
    cache = SqlResponseCache(sessions)
    first = await gateway(scripted_llm, cache).chat(USER, stage="judge", json_mode=True)
    # A new gateway (a rerun after a crash) with the same request: answered from the database.
    rerun = gateway(scripted_llm, cache)
    second = await rerun.chat(USER, stage="judge", json_mode=True)
    assert len(scripted_llm.requests) == 1
    assert (second.text, second.data, second.cached) == (first.text, {"a": 1}, True)
    assert rerun.usage["judge"].cached == 1
    # a different request is a different key
    await rerun.chat(USER, stage="judge", json_mode=False)
    assert len(scripted_llm.requests) == 2
    ledger = usage_by_stage(sessions)
    assert ledger["judge"].calls == 2 and ledger["judge"].prompt_tokens == 17


def test_sync_wrapper(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.enqueue(Reply(content="sync"))
    assert gateway(scripted_llm).chat_sync(USER, stage="s").text == "sync"


def test_offline_settings_refuse_to_build_a_gateway() -> None:
    with pytest.raises(LLMError, match="no LLM endpoint configured; set TRAJFORGE_LLM_BASE_URL"):
        LLMGateway(LLMSettings())


def test_parse_json_output_table() -> None:
    assert parse_json_output(" [1, 2] ") == ([1, 2], None)
    assert parse_json_output("nope")[1] == "invalid_json: Expecting value at char 0"


async def test_rate_limiter_spaces_request_starts() -> None:
    now, waits = 100.0, []

    async def sleep(seconds: float) -> None:
        waits.append(round(seconds, 6))

    limiter = RateLimiter(rps=4, sleep=sleep, clock=lambda: now)
    for _ in range(4):
        await limiter.wait()
    assert waits == [0.25, 0.5, 0.75]  # the first starts at once, then every 1/rps
    now = 200.0  # long idle: no debt carried over
    await limiter.wait()
    assert waits == [0.25, 0.5, 0.75]
    await RateLimiter(rps=0, sleep=sleep).wait()  # disabled


async def test_gateway_applies_the_rate_limit(scripted_llm: ScriptedLLM) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    settings = LLMSettings(base_url=scripted_llm.url, requests_per_second=10)
    gw = LLMGateway(settings, sleep=sleep)
    await asyncio.gather(*(gw.chat([{"role": "user", "content": str(i)}], stage="s") for i in range(5)))
    assert len(scripted_llm.requests) == 5
    assert len(waits) == 4 and waits[-1] > 0.3  # five starts, each 1/10 s after the one before


async def test_identical_requests_in_flight_share_one_call(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.default = Reply(content='{"x": 1}', delay_s=0.1)
    gw = gateway(scripted_llm)
    results = await asyncio.gather(*(gw.chat(USER, stage="s", json_mode=True) for _ in range(5)))
    assert len(scripted_llm.requests) == 1
    assert [r.data for r in results] == [{"x": 1}] * 5
    assert sorted(r.cached for r in results) == [False, True, True, True, True]


async def test_in_flight_failure_reaches_every_waiter(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.default = Reply(status=400, delay_s=0.05)
    gw = gateway(scripted_llm)
    outcomes = await asyncio.gather(*(gw.chat(USER, stage="s") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(o, LLMError) for o in outcomes)
    assert len(scripted_llm.requests) == 1


async def test_a_200_with_no_choices_is_retried_like_a_server_fault(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.enqueue(Reply(no_choices=True), Reply(no_choices=True), Reply(content="answered"))
    gw = gateway(scripted_llm)
    result = await gw.chat(USER, stage="policy")
    assert (result.text, result.attempts, gw.usage["policy"].retries) == ("answered", 3, 2)
    scripted_llm.default = Reply(no_choices=True)
    with pytest.raises(LLMError, match=r"policy: LLMError after 3 attempts .*: endpoint returned no choices"):
        await gateway(scripted_llm, max_retries=2).chat(
            [{"role": "user", "content": "again"}], stage="policy"
        )


def test_a_gateway_closed_with_its_event_loop_serves_the_next_loop(scripted_llm: ScriptedLLM) -> None:
    """Stages run one event loop per round and close the gateway on it (no "Event loop is closed"
    from a client left to the garbage collector); a caller that reuses the gateway gets a new client."""
    scripted_llm.enqueue(Reply(content="one"))
    scripted_llm.enqueue(Reply(content="two"))
    gw = gateway(scripted_llm)
    first = asyncio.run(closing(gw, gw.chat(USER, stage="a")))
    assert first.text == "one" and gw._routes["writer"].client.is_closed()
    second = asyncio.run(closing(gw, gw.chat([{"role": "user", "content": "again"}], stage="a")))
    assert second.text == "two" and gw._routes["writer"].client.is_closed()
