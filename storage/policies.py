"""Policy versions as stored: a `policy` row (name, version, where it lives), and the built-in
knn checkpoints under `checkpoints/knn/v<N>/` in the object store (so a worker on another
machine can load them; each process keeps a local copy under the home).

Registering a version and moving its checkpoint are storage; building the policy a round rolls
out from a row is the rollout package's (`rollout.versions.policy_factory`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.context import RoundContext
from storage.db import insert_ignore
from storage.keys import policy_checkpoint_prefix
from storage.models import Policy as PolicyRow
from trajforge.errors import ConfigError

STORE_SCHEME = "store:"
KNN = "knn"  # the built-in policy's name: its checkpoints are the trainer's default output


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


def upload_checkpoint(ctx: RoundContext, folder: Path, name: str, version: int) -> str:
    """Every file of `folder` into the object store; the `store:` URI of the copy."""
    prefix = policy_checkpoint_prefix(name, version)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            ctx.store.put(prefix + str(path.relative_to(folder)), path.read_bytes())
    return STORE_SCHEME + prefix


def local_checkpoint(ctx: RoundContext, uri: str) -> Path:
    """A local directory holding the checkpoint (downloaded once per home)."""
    if not uri.startswith(STORE_SCHEME):
        return Path(uri)
    prefix = uri.removeprefix(STORE_SCHEME)
    folder = ctx.settings.home / "cache" / prefix
    if not (folder / ".complete").exists():
        keys = list(ctx.store.list(prefix))
        if not keys:
            raise ConfigError(f"checkpoint {uri} is not in the object store; retrain with `trajforge evolve`")
        for key in keys:
            target = folder / key.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(ctx.store.get(key))
        (folder / ".complete").touch()
    return folder
