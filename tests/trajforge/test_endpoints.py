"""Endpoints per stage group: each group's calls go to its own server and model, carry at most its
`max_images`, and are charged to the round the stage works on."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from PIL import Image

from critics.llm import LLMEpisodeJudge
from tests.support.scripted_llm import Reply, ScriptedLLM
from trajforge.chat import image_part, text_part
from trajforge.domain import Query, StepView
from trajforge.endpoints import charge_round, fit_images, fit_views, stage_group
from trajforge.gateway import CachedCall, FailedCall, LLMGateway, closing
from trajforge.llm_settings import EndpointSettings, LLMSettings


def _png(width: int, height: int, color: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


class _Ledger:
    """A response cache that keeps what it is given, like `SqlResponseCache`."""

    def __init__(self) -> None:
        self.calls: list[CachedCall] = []

    def get(self, request_hash: str) -> CachedCall | None:
        return None

    def put(self, call: CachedCall) -> None:
        self.calls.append(call)

    def fail(self, call: FailedCall) -> None:
        pass


def test_stage_groups_and_merged_settings() -> None:
    assert [
        stage_group(s) for s in ("policy", "critic.step", "bottleneck.task", "csrs.step", "guidance.x")
    ] == [
        "policy",
        "critics",
        "bottleneck",
        "writer",
        "writer",
    ]
    llm = LLMSettings(
        base_url="http://shared/v1",
        model="qwen",
        max_tokens=256,
        critics=EndpointSettings(base_url="http://critic/v1", model="judge", max_images=1, concurrency=4),
    )
    critics, writer = llm.for_group("critics"), llm.for_group("writer")
    assert (critics.base_url, critics.model, critics.max_images, critics.concurrency, critics.max_tokens) == (
        "http://critic/v1",
        "judge",
        1,
        4,
        256,
    )
    assert (writer.base_url, writer.model, writer.max_images) == ("http://shared/v1", "qwen", None)
    # a policy endpoint alone: the loop is online for rollouts, offline for every other group
    only_policy = LLMSettings(policy=EndpointSettings(base_url="http://vllm/v1", model="ui-tars"))
    assert not only_policy.offline and list(only_policy.endpoints()) == ["policy"]
    assert only_policy.for_group("critics").offline


def test_each_group_calls_its_own_endpoint_and_is_charged_to_its_round() -> None:
    ledger = _Ledger()
    with (
        ScriptedLLM(default=Reply(content="shared")) as shared,
        ScriptedLLM(default=Reply(content="vllm")) as vllm,
    ):
        llm = LLMSettings(
            base_url=shared.url,
            model="writer-model",
            prompt_usd_per_1k=1.0,
            policy=EndpointSettings(base_url=vllm.url, model="ui-tars", prompt_usd_per_1k=0.0),
        )
        gateway = LLMGateway(llm, ledger)

        async def calls() -> list[str]:
            with charge_round(7):
                acted = await gateway.chat([{"role": "user", "content": "act"}], stage="policy")
                wrote = await gateway.chat([{"role": "user", "content": "write"}], stage="csrs.step")
            return [acted.text, wrote.text]

        assert asyncio.run(closing(gateway, calls())) == ["vllm", "shared"]
    assert [r.body["model"] for r in vllm.requests] == ["ui-tars"]
    assert [r.body["model"] for r in shared.requests] == ["writer-model"]
    assert [(c.stage, c.round_id, c.model, c.cost_usd) for c in ledger.calls] == [
        ("policy", 7, "ui-tars", 0.0),
        ("csrs.step", 7, "writer-model", 0.01),  # 10 prompt tokens at the shared price
    ]


def test_a_request_never_carries_more_images_than_its_endpoint_takes() -> None:
    """UI-TARS sends each history screenshot as a user message of its own: with `max_images: 2` the
    oldest go, with their messages, and the current screenshot stays last."""
    shots = [image_part(_png(4, 8, c)) for c in ("red", "green", "blue", "white")]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "You are a GUI agent."}]
    for shot in shots[:-1]:
        messages += [{"role": "user", "content": [shot]}, {"role": "assistant", "content": "Action: ..."}]
    messages.append({"role": "user", "content": [shots[-1]]})
    fitted = fit_images(messages, 2)
    images = [p for m in fitted if isinstance(m["content"], list) for p in m["content"]]
    assert images == shots[2:]
    assert [m["role"] for m in fitted] == ["user", "assistant", "assistant", "user", "assistant", "user"]
    assert fit_images(messages, None) is messages and fit_images(messages, 4) is messages

    with ScriptedLLM() as llm:
        gateway = LLMGateway(LLMSettings(base_url=llm.url, policy=EndpointSettings(max_images=1)))
        asyncio.run(closing(gateway, gateway.chat(messages, stage="policy")))
    assert [r.images for r in llm.requests] == [1]


def test_a_critic_joins_its_views_for_an_endpoint_that_takes_one_image() -> None:
    before, after = _png(30, 60, "red"), _png(30, 60, "blue")
    views, joined = fit_views([before, after], 1)
    assert joined and len(views) == 1
    assert Image.open(io.BytesIO(views[0])).size == (30 + 16 + 30, 60)
    three, joined = fit_views([before, after, before, after, before], 2)
    assert joined and [Image.open(io.BytesIO(v)).size[0] for v in three] == [30 * 3 + 32, 30 * 2 + 16]

    frames = {"b": before, "a": after}
    view = StepView({"kind": "click", "point": [500, 500]}, None, "b", "a", [], 30, 60)
    answer = '{"steps": [{"step": 1, "label": "GOOD", "summary": "s"}], "verdict": "correct"}'
    with ScriptedLLM(default=Reply(content=answer)) as llm:
        llm_settings = LLMSettings(base_url=llm.url, critics=EndpointSettings(max_images=1))
        gateway = LLMGateway(llm_settings)
        critic = LLMEpisodeJudge(gateway, frames.__getitem__)
        judged = asyncio.run(
            closing(
                gateway, critic.judge(Query(uid="q", app="settings", instruction="Open settings"), [view])
            )
        )
    assert judged.steps[0].label == "GOOD" and judged.verdict.label == "correct"
    assert [r.images for r in llm.requests] == [1]
    assert "side by side" in llm.requests[0].text


@pytest.mark.parametrize("group", ["critics", "writer"])
def test_a_group_without_an_endpoint_says_which_setting_to_set(group: str) -> None:
    from trajforge.errors import LLMError

    gateway = LLMGateway(LLMSettings(policy=EndpointSettings(base_url="http://127.0.0.1:9/v1")))
    stage = "critic.episode" if group == "critics" else "csrs.step"
    with pytest.raises(LLMError, match=f"llm.{group}.base_url"):
        asyncio.run(gateway.chat([{"role": "user", "content": [text_part("x")]}], stage=stage))
