"""Every object key trajforge writes is built in `storage/keys.py`: no other module spells a key's
top-level prefix."""

from __future__ import annotations

import re
from pathlib import Path

from storage.keys import blob_key, encoder_prefix, policy_checkpoint_prefix

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "annotation",
    "bench",
    "critics",
    "curation",
    "evolve",
    "flows",
    "querygen",
    "rollout",
    "storage",
    "trajforge",
)
PREFIX = re.compile(r"f?[\"'](blobs|shards|datasets|checkpoints|encoders|critics)/")


def test_no_module_but_keys_spells_an_object_key() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "storage" / "keys.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PREFIX.search(line)
    ]
    assert not spelled, f"object keys built outside storage/keys.py: {spelled}"


def test_the_key_builders() -> None:
    assert blob_key("ab" * 32).startswith("blobs/sha256/ab/ab/")
    assert policy_checkpoint_prefix("knn", 3) == "checkpoints/knn/v3/"
    assert encoder_prefix("f" * 64) == f"encoders/{'f' * 64}"
