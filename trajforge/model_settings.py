"""What the model sees and what trains it: the `policy:` and `trainer:` sections of the run config.

Importable from `trajforge.settings`, like every section; the environment prefixes are
`TRAJFORGE_POLICY_` and `TRAJFORGE_TRAINER_`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trajforge.actions import CODECS
from trajforge.actions.space import IMAGE_TRAINERS
from trajforge.families import FAMILY_NAMES
from trajforge.stage_settings import ExportFormat


class PolicySettings(BaseSettings):
    """How a VLM policy samples and what it remembers (`vlm` rollouts and trained checkpoints)."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_POLICY_", extra="forbid")

    temperature: float = Field(
        0.8, ge=0, le=2, description="Temperature of rollouts after the first (K > 1 needs diverse samples)."
    )
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling of those rollouts.")
    greedy_first: bool = Field(
        True, description="Rollout 0 of each query is greedy (temperature 0): the policy's own best guess."
    )
    seed: int = Field(
        0, description="Base of the per-episode sampling seed (mixed with the episode's id: reruns repeat)."
    )
    history: Literal["actions", "conclusion", "raw"] = Field(
        "conclusion",
        description="Earlier steps in the prompt: actions (the parsed action in words), conclusion (the "
        "model's own conclusion or intent where it wrote one, else the action in words; GUI-Owl), or raw "
        "(the output itself, cut to 300 characters).",
    )
    history_steps: int = Field(10, ge=0, le=100, description="Earlier steps sent as text.")
    history_images: int = Field(1, ge=1, le=16, description="Screenshots sent: the last k.")
    max_tokens: int | None = Field(
        1024, ge=1, description="Completion budget per step (thinking models need room)."
    )
    family: str | None = Field(
        None,
        description="The model family the served checkpoint belongs to (uitars15, qwen25vl, guiowl, "
        "agentcpm, mobiler1): each request is built as that family's published inference code builds it "
        "(prompt, history, image preprocessing, coordinate space) and its answers read with its codec; the "
        "history settings above then do not apply. None: trajforge's own prompt in the trainer's action "
        "format.",
        json_schema_extra={"enum": list(FAMILY_NAMES)},
    )

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        if value is not None and value not in FAMILY_NAMES:
            raise ValueError(f"unknown model family {value!r}; known: {', '.join(FAMILY_NAMES)}")
        return value


class TrainerSettings(BaseSettings):
    """What trains policy N+1 from dataset version N: the built-in knn policy, or an external command."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_TRAINER_", extra="forbid")

    command: str | None = Field(
        None,
        description="External trainer command line; {dataset} (the export directory), {output} (the "
        "checkpoint directory), {version} (the dataset version exported: LLaMA-Factory's dataset is "
        "`<dataset>_v{version}_train`) and {round} are filled in. None: the built-in knn policy.",
    )
    format: ExportFormat = Field("sft-sharegpt", description="Export format handed to an external trainer.")
    images: str = Field(
        "auto",
        description="Whose image loading the export's coordinates are computed for (`datasets export "
        "--trainer`): auto, the trainer the format is for; none, the screenshot as stored, resized only by "
        "the model's processor, as the rollout serves it (LLaMA-Factory with `image_max_pixels: 12845056`, "
        "the model's own limit, so the checkpoint is trained on the images it will be served).",
        json_schema_extra={"enum": list(IMAGE_TRAINERS)},
    )
    action_format: str = Field(
        "qwen",
        description="Action format of the export and of the trained policy: a codec name "
        "(`trajforge actions convert --help` lists them).",
        json_schema_extra={"enum": list(CODECS)},
    )

    family: str | None = Field(
        None,
        description="Export for an external trainer as this model family's conversations (uitars15, "
        "qwen25vl, guiowl, agentcpm, mobiler1; `datasets export --family`), and roll the trained checkpoint "
        "out as that family: fine-tune a released checkpoint on what it was trained to be sent. None: "
        "trajforge's own prompt in action_format.",
        json_schema_extra={"enum": list(FAMILY_NAMES)},
    )

    @field_validator("action_format")
    @classmethod
    def _known_codec(cls, value: str) -> str:
        if value not in CODECS:
            raise ValueError(f"unknown action format {value!r}; known: {', '.join(CODECS)}")
        return value

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        return PolicySettings._known_family(value)

    @field_validator("images")
    @classmethod
    def _known_trainer(cls, value: str) -> str:
        if value not in IMAGE_TRAINERS:
            raise ValueError(f"unknown trainer {value!r}; known: {', '.join(IMAGE_TRAINERS)}")
        return value

    name: str = Field(
        "trained", min_length=1, max_length=128, description="Policy name of external checkpoints."
    )
    endpoint: str | None = Field(
        None,
        description="OpenAI-compatible URL the external checkpoint is served from (vLLM, SGLang); "
        "{output} and {version} are filled in. Required with command.",
    )
    model: str = Field(
        "{output}", description="Model name at the endpoint; {output} and {version} filled in."
    )
    timeout_s: float = Field(86_400.0, gt=0, description="The trainer command's time limit.")

    @model_validator(mode="after")
    def _served_somewhere(self) -> TrainerSettings:
        """A checkpoint trained by a command must be served to be rolled out: said at load time,
        not after a round's rollout, judging and publishing."""
        if self.command is not None and not self.endpoint:
            raise ValueError(
                "trainer.command is set but trainer.endpoint is not: say where the trained checkpoint "
                "will be served (an OpenAI-compatible URL; {output} and {version} are filled in)"
            )
        return self
