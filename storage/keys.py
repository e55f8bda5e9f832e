"""Every object key trajforge writes is built here (datatrove's DataFolder idea)."""

from __future__ import annotations

import hashlib
import re

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
BLOBS = "blobs/"  # every screenshot lives under it (Label Studio's S3 storage scans it)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_key(sha256: str, ext: str = "png") -> str:
    """`blobs/sha256/ab/cd/abcd….png`: two fan-out levels keep directories small."""
    if not _SHA256.match(sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return f"{BLOBS}sha256/{sha256[:2]}/{sha256[2:4]}/{sha256}.{ext}"


def shard_key(sha256: str, fmt: str = "parquet") -> str:
    return f"shards/{sha256[:2]}/{sha256}.{fmt}"


def manifest_key(dataset: str, version: int) -> str:
    return f"datasets/{dataset}/v{version:05d}/manifest.json"


def critic_checkpoint_key(critic: str, version: str) -> str:
    """`critics/<critic>/<version>.json`: a learned critic's fitted weights, by content hash."""
    return f"critics/{critic}/{version}.json"


def policy_checkpoint_prefix(name: str, version: int) -> str:
    """`checkpoints/<policy>/v<version>/`: a trained policy's files."""
    return f"checkpoints/{name}/v{version}/"


def encoder_prefix(sha256: str) -> str:
    """`encoders/<sha256>`: a screen encoder's checkpoint files, by the hash of their contents."""
    return f"encoders/{sha256}"
