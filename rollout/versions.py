"""Building the policy a round rolls out from its registered version (`storage.policies`): the
random explorer, the guided oracle, a knn checkpoint (with guidance's demonstrations in its
memory), a routed candidate, or an external checkpoint served behind an OpenAI-compatible endpoint
and rolled out by the VLM policy through the gateway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rollout.policies import NoisyOracle, OracleNoise, Policy, RandomExplorer, VLMPolicy, VLMPolicyConfig
from rollout.policies.knn import KnnPolicy
from rollout.policies.knn_memory import Memory, demonstrated
from rollout.policies.routed import Routed
from storage.context import RoundContext
from storage.llm_cache import build_gateway
from storage.models import Policy as PolicyRow
from storage.policies import KNN, local_checkpoint
from trajforge.errors import ConfigError
from trajforge.settings import LLMSettings


def policy_llm(
    llm: LLMSettings, devices: int, endpoint: str | None = None, model: str | None = None
) -> LLMSettings:
    """The endpoints with the policy's own: a registered checkpoint's endpoint and model where given,
    and as many requests in flight as there are devices unless `llm.policy.concurrency` says otherwise."""
    own = llm.policy.model_copy(
        update={
            "concurrency": llm.policy.concurrency or devices,
            **({"base_url": endpoint} if endpoint else {}),
            **({"model": model} if model else {}),
        }
    )
    return llm.model_copy(update={"policy": own})


def _on_first_use(
    ctx: RoundContext, policy_id: int, demos: list[dict[str, Any]] | None
) -> Callable[[], Policy]:
    """`policy_factory`, made when its first episode starts: a routed policy may hand tasks to several
    older knn versions, and each one's memory is loaded only if one of its tasks comes up."""
    made: list[Callable[[], Policy]] = []
    lock = threading.Lock()

    def policy() -> Policy:
        with lock:
            if not made:
                made.append(policy_factory(ctx, policy_id, demos))
        return made[0]()

    return policy


def policy_factory(
    ctx: RoundContext, policy_id: int, demos: list[dict[str, Any]] | None = None
) -> Callable[[], Policy]:
    """A fresh policy per episode, of the registered version `policy_id`; `demos` (guidance's
    reference steps, `rollout.loop.latest_guidance`) join a knn policy's memory."""
    with ctx.sessions() as s:
        row = s.get(PolicyRow, policy_id)
    if row is None:
        raise ConfigError(f"policy id {policy_id} is not registered")
    meta = row.meta or {}
    if routes := meta.get("routes"):  # a candidate with the tasks it lost handed to earlier policies
        base = policy_factory(ctx, int(routes["base"]), demos)
        made = {pid: _on_first_use(ctx, pid, demos) for pid in set(routes["apps"].values())}
        others = {app: made[pid] for app, pid in routes["apps"].items()}
        return lambda: Routed(base, others, row.name, row.version)
    if row.name == "random-explorer":
        max_actions = int(meta.get("max_actions", 15))
        return lambda: RandomExplorer(max_actions=max_actions, version=row.version)
    if row.name == "guided-demo":
        return lambda: NoisyOracle(OracleNoise(), version=row.version)
    if row.name == KNN:
        if not row.checkpoint_uri:
            raise ConfigError(f"policy {KNN} v{row.version} has no checkpoint; retrain it")
        memory = demonstrated(Memory.load(local_checkpoint(ctx, row.checkpoint_uri)), demos or [], ctx.frames)
        frames, vectors = ctx.frames, dict[str, Any]()
        return lambda: KnnPolicy(memory, frames, row.version, vectors=vectors)
    if row.endpoint:
        settings = ctx.settings
        model = str(meta.get("model") or settings.llm.for_group("policy").model)
        llm = policy_llm(settings.llm, settings.evolve.devices, endpoint=row.endpoint, model=model)
        gateway = build_gateway(llm, ctx.sessions, "policy")
        assert gateway is not None  # the endpoint is set
        fmt = meta.get("format", "qwen")
        # The family the row was registered with (the user's own checkpoint, `evolve.first_policy`); a
        # candidate trained on an export speaks the export's prompt, which `format` alone gives.
        config = VLMPolicyConfig.from_settings(
            ctx.settings.policy,
            name=row.name,
            version=row.version,
            model=model,
            format=fmt,
            family=meta.get("family"),
        )
        return lambda: VLMPolicy(config, gateway, ctx.frames)
    raise ConfigError(
        f"policy {row.name} v{row.version} has neither a built-in implementation nor an endpoint; "
        "set trainer.endpoint to where the checkpoint is served"
    )
