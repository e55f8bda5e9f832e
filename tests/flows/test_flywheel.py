"""The flywheel with real parts (docs/loop.md, "Your own trainer"): round 1's dataset version is
exported for the qwen25vl family, LLaMA-Factory's own `llamafactory-cli train` fine-tunes the tiny
random Qwen2.5-VL on it, `transformers serve` loads the checkpoint it leaves, and round 2 rolls that
checkpoint out through the same family.

A pass-through proxy in front of the server keeps every request round 2 really sent. Each one is
compared with the rows the checkpoint was trained on: the same system prompt, the same user turn
layout, the same image as the trainer fed it, and the coordinate space the rows' answers are in.
"""

from __future__ import annotations

import base64
import io
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from tests.conftest import free_port, service_missing
from tests.flows.test_cli import cli
from tests.support.recording_proxy import recording_proxy
from tests.support.trainers import trainer_python
from tests.support.transformers_serve import serve_python, transformers_serve
from trajforge.families import get_family

pytestmark = pytest.mark.slow

# The qwen25vl family's user turn (trajforge/families/qwen.py, after Qwen2.5-VL's mobile agent cookbook):
# the task, the steps done so far, then the screenshot.
USER_TURN = re.compile(
    r"The user query:  .+\nTask progress \(You have done the following operation on the current device\): "
    r"(Step \d+: .*?; )*<image>",
    re.DOTALL,
)


def _sft_yaml(path: Path, model: Path) -> None:
    """A LLaMA-Factory training config as docs/loop.md's recipe writes it, at two CPU steps."""
    config = {
        "model_name_or_path": str(model),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "template": "qwen2_vl",
        "image_max_pixels": 12845056,  # the model's own limit: trained on the images it is served
        "mask_history": True,  # earlier turns are the model's history, not targets
        "cutoff_len": 8192,
        "max_samples": 8,
        "preprocessing_num_workers": 1,
        "save_strategy": "no",
        "per_device_train_batch_size": 1,
        "max_steps": 2,
        "logging_steps": 1,
        "report_to": "none",
    }
    path.write_text(yaml.safe_dump(config))


def _live(request: dict[str, Any]) -> tuple[str, str, list[tuple[int, int]]]:
    """A sent request as the export writes a row: system text, user text with `<image>` tags, image sizes."""
    system, user = request["messages"]
    text, sizes = "", []
    for part in user["content"]:
        if part["type"] == "text":
            text += part["text"]
        else:
            png = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            sizes.append(Image.open(io.BytesIO(png)).size)
            text += "<image>"
    return system["content"], text, sizes


def test_a_checkpoint_trained_by_llamafactory_is_served_and_rolled_out_on_what_it_was_trained(
    tmp_path: Path,
) -> None:
    serve, lf = serve_python(), trainer_python("llamafactory")
    if serve is None or not Path(serve).is_file() or not lf.is_file():
        service_missing("transformers serve or LLaMA-Factory is not installed (.ci/run builds both)")
    with (
        transformers_serve(str(serve), tmp_path / "serve", free_port(), pinned=False) as server,
        recording_proxy(server.url) as (url, sent),
    ):
        _sft_yaml(tmp_path / "sft.yaml", Path(server.model))
        train = f"{lf.parent / 'llamafactory-cli'} train {tmp_path / 'sft.yaml'}"
        config = {
            "home": str(tmp_path / "home"),
            "apps": ["settings"],
            "policy": {"max_tokens": 8},
            "evolve": {
                "queries_per_app": 3,  # the random explorer's round 1 then holds action rows
                "rollouts": 2,
                "devices": 1,
                "max_steps": 8,
                "revisit_share": 0,  # round 2 rolls out new queries only: its requests are the cost here
                "heldout_per_app": 0,
                "promote": "always",
            },
            "curate": {"encoder_steps": 3},
            "trainer": {  # docs/loop.md's recipe
                "command": f"{train} dataset_dir={{dataset}} output_dir={{output}} "
                "dataset=trajforge_v{version}_train",
                "format": "sft-sharegpt",
                "family": "qwen25vl",
                "images": "none",
                "name": "tiny-sft",
                "endpoint": url,
                "model": "{output}",
            },
        }
        (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
        env = {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "WANDB_DISABLED": "true"}
        done = cli(
            "evolve", "--rounds", "2", "--config", str(tmp_path / "run.yaml"),
            env=env, cwd=tmp_path, timeout=900, shared_prefect=True,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "round 2/2: policy tiny-sft@1" in done.stdout, done.stdout
    trained = tmp_path / "home" / "training" / "trajforge" / "v1"
    checkpoint = trained / "tiny-sft-checkpoint"
    assert "train_loss" in json.loads((checkpoint / "train_results.json").read_text())  # LLaMA-Factory's own
    export = trained / "sft-sharegpt-qwen25vl"
    rows = [json.loads(line) for line in (export / "trajforge_v1_train.jsonl").read_text().splitlines()]
    actions = [r for r in rows if "<tool_call>" in r["messages"][-1]["content"]]  # the family's answers
    assert actions, "round 1's version holds no action row to train on"
    with sqlite3.connect(tmp_path / "home" / "trajforge.db") as conn:
        reasons = conn.execute(
            "select e.reason from episode e join round r on r.id = e.round_id where r.number = 2"
        ).fetchall()
    assert reasons and all(reason != "policy_error" for (reason,) in reasons), reasons
    # every request round 2 sent went to the trained checkpoint, and asked it what it was trained on
    assert sent and all(request["model"] == str(checkpoint) for request in sent)
    trained_on = {r["messages"][0]["content"] for r in actions}
    trained_size = {Image.open(export / r["images"][-1]).size for r in actions}
    marker = json.loads((export / ".trajforge-export.json").read_text())
    assert all(USER_TURN.fullmatch(r["messages"][1]["content"]) for r in actions)
    for request in sent:
        system, user, sizes = _live(request)
        assert trained_on == {system}  # one system prompt, the same text
        assert USER_TURN.fullmatch(user), user[:300]
        assert set(sizes) == trained_size  # the image as stored, fed whole to the same processor
        space = get_family("qwen25vl").coordinate_screen(*sizes[-1])
        assert set(marker["card"]["coordinate_sizes"]) == {f"{space.width}x{space.height}"}
