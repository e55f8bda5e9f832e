"""Policy versions: registering them, and building the one a round rolls out.

A registered policy is a `policy` row: name, version, and where it lives. The built-in
knn checkpoints live in the object store under `checkpoints/knn/v<N>/` (so a worker on
another machine can load them; each process keeps a local copy under the home). An
external checkpoint is served behind an OpenAI-compatible endpoint and is rolled out by
the VLM policy through the gateway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from evolve.spine import Spine, build_gateway, policy_llm
from rollout.policies import NoisyOracle, OracleNoise, Policy, RandomExplorer, VLMPolicy, VLMPolicyConfig
from rollout.policies.knn import NAME as KNN
from rollout.policies.knn import KnnPolicy
from rollout.policies.knn_memory import Memory, demonstrated
from rollout.policies.routed import Routed
from storage.db import insert_ignore
from storage.keys import policy_checkpoint_prefix
from storage.models import Policy as PolicyRow
from trajforge.errors import ConfigError

STORE_SCHEME = "store:"


def register_policy(
    s: Session,
    name: str,
    version: int,
    meta: dict[str, Any] | None = None,
    endpoint: str | None = None,
    checkpoint_uri: str | None = None,
    parent_id: int | None = None,
) -> int:
    """The policy row's id; registering the same name and version again changes nothing."""
    row = {
        "name": name,
        "version": version,
        "endpoint": endpoint,
        "checkpoint_uri": checkpoint_uri,
        "parent_id": parent_id,
        "meta": meta or {},
    }
    insert_ignore(s, PolicyRow, [row], ["name", "version"])
    return s.scalars(select(PolicyRow.id).where(PolicyRow.name == name, PolicyRow.version == version)).one()


def upload_checkpoint(spine: Spine, folder: Path, name: str, version: int) -> str:
    """Every file of `folder` into the object store; the `store:` URI of the copy."""
    prefix = policy_checkpoint_prefix(name, version)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            spine.store.put(prefix + str(path.relative_to(folder)), path.read_bytes())
    return STORE_SCHEME + prefix


def local_checkpoint(spine: Spine, uri: str) -> Path:
    """A local directory holding the checkpoint (downloaded once per home)."""
    if not uri.startswith(STORE_SCHEME):
        return Path(uri)
    prefix = uri.removeprefix(STORE_SCHEME)
    folder = spine.settings.home / "cache" / prefix
    if not (folder / ".complete").exists():
        keys = list(spine.store.list(prefix))
        if not keys:
            raise ConfigError(f"checkpoint {uri} is not in the object store; retrain with `trajforge evolve`")
        for key in keys:
            target = folder / key.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(spine.store.get(key))
        (folder / ".complete").touch()
    return folder


def _on_first_use(spine: Spine, policy_id: int, demos: list[dict[str, Any]] | None) -> Callable[[], Policy]:
    """`policy_factory`, made when its first episode starts: a routed policy may hand tasks to several
    older knn versions, and each one's memory is loaded only if one of its tasks comes up."""
    made: list[Callable[[], Policy]] = []
    lock = threading.Lock()

    def policy() -> Policy:
        with lock:
            if not made:
                made.append(policy_factory(spine, policy_id, demos))
        return made[0]()

    return policy


def policy_factory(
    spine: Spine, policy_id: int, demos: list[dict[str, Any]] | None = None
) -> Callable[[], Policy]:
    """A fresh policy per episode, of the registered version `policy_id`; `demos` (guidance's
    reference steps, `evolve.revisits.demonstrations`) join a knn policy's memory."""
    with spine.sessions() as s:
        row = s.get(PolicyRow, policy_id)
    if row is None:
        raise ConfigError(f"policy id {policy_id} is not registered")
    meta = row.meta or {}
    if routes := meta.get("routes"):  # a candidate with the tasks it lost handed to earlier policies
        base = policy_factory(spine, int(routes["base"]), demos)
        made = {pid: _on_first_use(spine, pid, demos) for pid in set(routes["apps"].values())}
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
        memory = demonstrated(
            Memory.load(local_checkpoint(spine, row.checkpoint_uri)), demos or [], spine.frames
        )
        frames, vectors = spine.frames, dict[str, Any]()
        return lambda: KnnPolicy(memory, frames, row.version, vectors=vectors)
    if row.endpoint:
        settings = spine.settings
        model = str(meta.get("model") or settings.llm.for_group("policy").model)
        llm = policy_llm(settings.llm, settings.evolve.devices, endpoint=row.endpoint, model=model)
        gateway = build_gateway(llm, spine.sessions, "policy")
        assert gateway is not None  # the endpoint is set
        fmt = meta.get("format", "qwen")
        # The family the row was registered with (the user's own checkpoint, `evolve.first_policy`); a
        # candidate trained on an export speaks the export's prompt, which `format` alone gives.
        config = VLMPolicyConfig.from_settings(
            spine.settings.policy,
            name=row.name,
            version=row.version,
            model=model,
            format=fmt,
            family=meta.get("family"),
        )
        return lambda: VLMPolicy(config, gateway, spine.frames)
    raise ConfigError(
        f"policy {row.name} v{row.version} has neither a built-in implementation nor an endpoint; "
        "set trainer.endpoint to where the checkpoint is served"
    )
