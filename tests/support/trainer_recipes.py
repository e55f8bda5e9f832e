"""The trainers' install recipes, as `.ci/run` builds their venvs and docs/datasets.md gives them.

Standard library only: `.ci/run` reads them with the system Python before any venv exists
(`python3 tests/support/trainer_recipes.py`, one `VENV|CHECK|TORCH|PINS` line per trainer).
"""

from __future__ import annotations

TRAINERS = {  # trainer: (its virtualenv, the export format its recipe reads)
    "llamafactory": ("llamafactory-0.9.5", "sft-sharegpt"),
    "swift": ("ms-swift-4.6.0", "sft-messages"),
    "verl": ("verl-0.9.1", "rl-verl"),
}
# docs/datasets.md's install recipe of each trainer, as `.ci/run` runs it: the torch pair first, then the trainer, each one `pip install` in a fresh venv. Every
# trainer takes torch 2.14.1 with torchvision 0.29.1, a build pair that imports (both lie on this disk):
# with torch 2.13.0, pip pulls PyPI's torchvision 0.28 and torchaudio 2.11, CUDA builds, and
# LLaMA-Factory's multimodal plugin fails to import (`libc10_cuda.so`). Each check is the trainer's
# multimodal code path (the image loading its recipe runs on our exports).
TORCH_PAIR = "torch==2.14.1 torchvision==0.29.1"
RECIPES = {  # trainer: (the trainer's pins, its multimodal import)
    "llamafactory": ("llamafactory==0.9.5", "llamafactory.data.mm_plugin"),
    "swift": ("ms-swift==4.6.0 qwen-vl-utils==0.0.14", "swift.dataset, qwen_vl_utils"),
    "verl": ("verl==0.9.1 qwen-vl-utils==0.0.14", "verl.trainer.ppo.reward, qwen_vl_utils"),
}


def recipe_lines() -> list[str]:
    """`VENV|CHECK|TORCH|PINS` per trainer, the lines `.ci/run` builds the cached venvs from."""
    return [f"{TRAINERS[t][0]}|{check}|{TORCH_PAIR}|{pins}" for t, (pins, check) in RECIPES.items()]


if __name__ == "__main__":
    print("\n".join(recipe_lines()))
