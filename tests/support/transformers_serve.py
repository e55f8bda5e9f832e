"""A real OpenAI-compatible model server: `transformers serve` with the tiny random Qwen2.5-VL.

It runs from a virtualenv of its own (`.ci/run` builds it: torch 2.14.1 with torchvision 0.29.1,
which transformers 5's Qwen2.5-VL image processor needs, and `transformers[serving]`), so its real
chat template and image processor see every request. `TRAJFORGE_TEST_SERVE_PYTHON` names its Python.
The model answers garbage; what a test learns is that every request is accepted.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import server_process

TINY = Path(__file__).with_name("tiny_qwen_vl.py")


@dataclass(frozen=True)
class ModelServer:
    url: str  # the OpenAI base URL, .../v1
    model: str  # the name the server is pinned to (the model folder)


def serve_python() -> str | None:
    return os.environ.get("TRAJFORGE_TEST_SERVE_PYTHON")


@contextmanager
def transformers_serve(
    python: str, workdir: Path, port: int, timeout_s: float = 180, pinned: bool = True
) -> Iterator[ModelServer]:
    """Build the tiny model with the server's own transformers, serve it on 127.0.0.1:port, stop it after.
    `pinned`: the server answers for the tiny model only; else it loads whichever local model folder a
    request names (a checkpoint trained meanwhile, say)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    model = workdir / "tiny-qwen2.5-vl"
    subprocess.run([python, str(TINY), str(model)], check=True, capture_output=True, env=env, timeout=300)
    cli = str(Path(python).with_name("transformers"))
    forced = [str(model)] if pinned else []
    args = [cli, "serve", *forced, "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    url = f"http://127.0.0.1:{port}"
    with server_process(args, env, url, workdir / "serve.log", timeout_s, start_new_session=True):
        yield ModelServer(f"{url}/v1", str(model))
