"""Each trainer's own code on each export: the image it feeds, the rows it keeps, the reward it loads.

Every trainer runs in a virtualenv of its own, as docs/datasets.md's recipes install it (`.ci/run`
builds them): LLaMA-Factory 0.9.5, ms-swift 4.6.0 and verl 0.9.1. For every action format:

- the image as fed: the trainer's own image loading (LLaMA-Factory's qwen2_vl plugin with its
  default `image_max_pixels`, ms-swift's and verl's qwen-vl-utils `fetch_image`), then the
  Qwen2.5-VL image processor; every tap of the export, read on that image, lands inside its
  target element's box;
- ms-swift's own `load_dataset` keeps every row of the sft-messages export, each answer the
  same string the export wrote;
- verl's own reward loader scores the rl-verl export with the `reward.py` written beside it,
  in a virtualenv without trajforge or its dependencies.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest

from publish.exports import export
from tests.conftest import service_missing
from tests.support.trainer_recipes import RECIPES, TORCH_PAIR, TRAINERS
from tests.support.trainers import run_script, tap_check, trainer_python

FORMATS = ["qwen", "mobiler1", "uitars15", "uitars", "agentcpm", "canonical", "androidworld"]
SWIFT_LOAD = """
import json, sys
from swift.dataset import load_dataset
loaded = {}
for path in json.load(open(sys.argv[1])):
    dataset, _ = load_dataset([path], split_dataset_ratio=0)
    loaded[path] = [[m["content"] for m in row["messages"]] for row in dataset]
print(json.dumps(loaded))
"""
VERL_REWARD = """
import json, sys
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
import importlib.util
if importlib.util.find_spec("trajforge") is not None:
    sys.exit("trajforge is importable in the trainer's environment: the test would prove nothing")
reward, cases = sys.argv[1], json.load(open(sys.argv[2]))
config = OmegaConf.create({"reward": {"custom_reward_function": {
    "path": reward, "name": "compute_score", "reward_kwargs": {"scheme": "binary"}}}})
fn = get_custom_reward_fn(config)
print(json.dumps([[fn(data_source=c["data_source"], solution_str=a, ground_truth=c["ground_truth"],
                      extra_info=c["extra_info"])["score"] for a in c["answers"]] for c in cases]))
"""


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """SQLite only: what is checked is what the trainers make of the files, the same on every database."""
    return f"sqlite:///{tmp_path / 'test.db'}"


def _python(trainer: str) -> str:
    path = trainer_python(trainer)
    if not path.is_file():
        service_missing(f"{path} is not installed (TRAJFORGE_TEST_TRAINERS; .ci/run installs the trainers)")
    return str(path)


def _run(python: str, script: str, *args: str) -> object:
    try:
        return run_script(python, script, *args)
    except RuntimeError as exc:
        pytest.fail(str(exc))


MULTIMODAL = """
import sys
from PIL import Image
from transformers import Qwen2VLImageProcessor
for module in sys.argv[1].split(","):
    __import__(module.strip())
grid = Qwen2VLImageProcessor()(images=[Image.new("RGB", (540, 1200))], return_tensors="np")["image_grid_thw"]
print([int(n) for n in grid[0]])
"""


def test_the_docs_give_each_trainers_recipe_as_ci_installs_it() -> None:
    """`.ci/run` builds the venvs from RECIPES; the recipe in docs/datasets.md must be the same pins."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text(encoding="utf-8")
    assert f"install {TORCH_PAIR}" in readme
    for pins, _ in RECIPES.values():
        assert f"install {pins}" in readme, pins


@pytest.mark.slow
@pytest.mark.parametrize("trainer", sorted(RECIPES))
def test_each_trainers_venv_imports_its_multimodal_code_path(trainer: str) -> None:
    """The recipe's venv imports the trainer's image loading and runs Qwen2.5-VL's image processor
    (transformers 5 needs torchvision for it): a CUDA-only torchvision fails here, not in training."""
    grid = _run(_python(trainer), MULTIMODAL, RECIPES[trainer][1])
    assert grid == [1, 86, 38]  # 540x1200, smart-resized to 532x1204 pixels, in 14-pixel patches


@pytest.mark.slow
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_every_tap_lands_in_its_target_on_the_image_the_trainer_feeds(version, tmp_path: Path, trainer: str):
    _python(trainer)
    _, sessions, store, _ = version
    checks = tap_check(sessions, store, "gui", 1, trainer, FORMATS, tmp_path)
    for action_format, check in checks.items():
        skipped = {r for r in check.report.skipped if r != "no_action_ground_truth"}
        assert all(r.startswith("action_not_representable:") for r in skipped), (action_format, skipped)
        assert check.taps > 0 and not check.misses, (trainer, action_format, check.misses[:3])


@pytest.mark.slow
def test_swift_keeps_every_row_of_every_messages_format_as_written(version, tmp_path: Path) -> None:
    python = _python("swift")
    _, sessions, store, _ = version
    written = {}
    for action_format in FORMATS:
        out = tmp_path / action_format
        export(
            sessions, store, "gui", 1, "sft-messages", str(out), action_format, weights="keep", max_side=540
        )
        for file in sorted(out.glob("*.jsonl")):
            lines = file.read_text().splitlines()
            written[str(file)] = [[m["content"] for m in json.loads(line)["messages"]] for line in lines]
    (tmp_path / "files.json").write_text(json.dumps(sorted(written)))
    assert _run(python, SWIFT_LOAD, str(tmp_path / "files.json")) == written


@pytest.mark.slow
def test_verl_scores_the_export_with_the_reward_written_beside_it(version, tmp_path: Path) -> None:
    """In verl's virtualenv, where trajforge is not importable: verl's own loader, our reward.py."""
    python = _python("verl")
    _, sessions, store, _ = version
    for action_format in ("qwen", "agentcpm", "mobiler1"):
        out = tmp_path / action_format
        export(sessions, store, "gui", 1, "rl-verl", str(out), action_format, max_side=540)
        cases = [
            {
                "data_source": r["data_source"],
                "ground_truth": r["reward_model"]["ground_truth"],
                "extra_info": r["extra_info"],
                "answers": [json.loads(r["reward_model"]["ground_truth"])["formatted"], "I tap the button."],
            }
            for r in pl.read_parquet(out / "train.parquet").to_dicts()
        ]
        (tmp_path / "cases.json").write_text(json.dumps(cases))
        scores = _run(python, VERL_REWARD, str(out / "reward.py"), str(tmp_path / "cases.json"))
        assert scores == [[1.0, -1.0]] * len(cases), action_format


VERL_DATASET = """
import json, sys
from omegaconf import OmegaConf
from transformers import AutoProcessor, AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
model, files = sys.argv[1], json.loads(sys.argv[2])
config = OmegaConf.create({"prompt_key": "prompt", "image_key": "images", "max_prompt_length": 8192,
                           "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1})
dataset = RLHFDataset(data_files=files, tokenizer=AutoTokenizer.from_pretrained(model), config=config,
                      processor=AutoProcessor.from_pretrained(model))
batch = collate_fn([dataset[i] for i in range(len(dataset))])
print(json.dumps([len(dataset), [json.loads(t["ground_truth"])["formatted"] for t in batch["reward_model"]]]))
"""


@pytest.mark.slow
def test_verls_rlhf_dataset_loads_and_collates_every_row(version, tmp_path: Path) -> None:
    """The recipe's `data.train_files`, read by verl's own RLHFDataset with a Qwen2.5-VL processor."""
    python = _python("verl")
    _, sessions, store, _ = version
    report = export(sessions, store, "gui", 1, "rl-verl", str(tmp_path / "tf1"), "qwen", max_side=1000)
    files = json.dumps([str(tmp_path / "tf1" / "train.parquet")])
    loaded = _run(python, VERL_DATASET, _tiny_model(python, tmp_path / "model"), files)
    assert isinstance(loaded, list)
    rows, answers = loaded
    written = [
        json.loads(r["reward_model"]["ground_truth"])["formatted"]
        for r in pl.read_parquet(tmp_path / "tf1" / "train.parquet").to_dicts()
    ]
    assert rows == report.rows["train"] == len(written) and answers == written


def _tiny_model(python: str, out: Path) -> str:
    """A tiny random Qwen2.5-VL built offline by the trainer's own transformers."""
    builder = Path(__file__).resolve().parents[1] / "support" / "tiny_qwen_vl.py"
    done = subprocess.run(
        [python, str(builder), str(out)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return str(out)


def _train(command: list[str], cwd: Path, **extra_env: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "WANDB_DISABLED": "true", **extra_env}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=cwd, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    return log


@pytest.mark.slow
def test_the_llamafactory_recipe_trains_two_cpu_steps_on_every_row(version, tmp_path: Path) -> None:
    """docs/datasets.md's recipe as written: `dataset_dir` the export, `template: qwen2_vl`, and
    `mask_history: true` for a family's rows, whose earlier turns (UI-TARS's joined outputs) are
    history, never targets: the example LLaMA-Factory prints trains on one answer."""
    python = _python("llamafactory")
    _, sessions, store, _ = version
    report = export(sessions, store, "gui", 1, "sft-sharegpt", str(tmp_path / "tf1"), family="uitars15")
    (tmp_path / "train.yaml").write_text(
        "\n".join(
            [
                f"model_name_or_path: {_tiny_model(python, tmp_path / 'model')}",
                "stage: sft",
                "do_train: true",
                "finetuning_type: full",
                f"dataset_dir: {tmp_path / 'tf1'}",
                "dataset: gui_v1_train",
                "template: qwen2_vl",
                "mask_history: true",
                "cutoff_len: 8192",
                "preprocessing_num_workers: 1",
                f"output_dir: {tmp_path / 'out'}",
                "save_strategy: 'no'",
                "per_device_train_batch_size: 1",
                "max_steps: 2",
                "logging_steps: 1",
                "report_to: none",
            ]
        )
    )
    log = _train([str(Path(python).parent / "llamafactory-cli"), "train", "train.yaml"], tmp_path)
    assert re.search(rf"Num examples = {report.rows['train']}\b", log), log[-3000:]  # every row kept
    assert "'train_loss'" in log or "train_loss" in log
    shown = log.split("\ninputs:\n", 1)[1].split("\nlabel_ids:\n", 1)[0]  # the example it prints
    labels = log.split("\nlabels:\n", 1)[1].split("\n[", 1)[0]
    assert shown.count("<|im_start|>assistant") > 1 and labels.count("Action:") == 1, labels


@pytest.mark.slow
def test_the_swift_recipe_trains_two_cpu_steps_on_every_row(version, tmp_path: Path) -> None:
    """`swift sft --dataset <export>/gui_v1_train.jsonl`: no row fails the template's encode."""
    python = _python("swift")
    _, sessions, store, _ = version
    report = export(
        sessions, store, "gui", 1, "sft-messages", str(tmp_path / "tf1"), "agentcpm", max_side=1000
    )
    model = _tiny_model(python, tmp_path / "model")
    swift = str(Path(python).parent / "swift")
    args = {
        "--model": model,
        "--model_type": "qwen2_5_vl",
        "--template": "qwen2_5_vl",
        "--dataset": str(tmp_path / "tf1" / "gui_v1_train.jsonl"),
        "--tuner_type": "full",
        "--max_steps": "2",
        "--per_device_train_batch_size": "1",
        "--gradient_accumulation_steps": "1",
        "--max_length": "4096",
        "--output_dir": str(tmp_path / "out"),
        "--report_to": "none",
        "--save_strategy": "no",
        "--dataset_num_proc": "1",
        "--split_dataset_ratio": "0",
    }
    # docs/datasets.md's recipe: image paths are relative to the export, rooted by ROOT_IMAGE_DIR
    log = _train(
        [swift, "sft", *(x for pair in args.items() for x in pair)],
        tmp_path,
        ROOT_IMAGE_DIR=str(tmp_path / "tf1"),
    )
    assert re.search(rf"num_rows: {report.rows['train']}\b", log), log[-3000:]
    assert "errors in the template" not in log  # swift's silent row swap never happened
    assert "'global_step/max_steps': '2/2'" in log
