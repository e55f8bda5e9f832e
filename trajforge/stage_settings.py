"""Settings of the stages: curation, critics, annotation, the evolve loop and the trainer.

Each is a pydantic-settings class with its own `TRAJFORGE_<AREA>_` prefix and its own
`<area>:` section of the run config; `trajforge.settings` composes them into `Settings`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trajforge.domain import mix_problem
from trajforge.world.model import FaultConfig

ExportFormat = Literal["sft-sharegpt", "sft-messages", "rl-verl", "hf", "browsergym"]  # the one list
FeaturizerName = Literal["thumb", "phash", "resnet"]  # screenshot features for trajectory dedup
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def dataset_name_problem(name: str) -> str | None:
    """Why `name` cannot name a dataset (None: it can). A dataset name becomes a folder and an object
    key prefix, so it is a plain name: no path, no `..`, nothing that leaves the home."""
    if _PLAIN_NAME.fullmatch(name) and ".." not in name:
        return None
    return (
        f"dataset name {name!r} is not a plain name; use letters, digits, '.', '_' and '-' "
        "(starting with a letter or digit, at most 128), e.g. 'trajforge' or 'web-v2'"
    )


class CurationSettings(BaseSettings):
    """Curation of a judged round: trajectory dedup, guidance, thoughts, recovery, balancing."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_CURATE_", extra="forbid")

    featurizer: FeaturizerName = Field(
        "resnet",
        description="Screenshot features for trajectory dedup: resnet is the screen encoder trained on "
        "this store's screenshots (`trajforge curate train-encoder`; evolve trains one after round 1), or "
        "resnet_weights when set; until one is trained dedup uses phash and logs why. phash (64-bit DCT "
        "hash) and thumb (grey 16x32 thumbnail) need no weights (bench/bench_dedup_quality.py).",
    )
    resnet_weights: str | None = Field(
        None,
        description="Local directory (or hub id, where a hub is reachable) of a ResNet checkpoint, "
        "e.g. an ImageNet ResNet-50; overrides the trained encoder.",
    )
    encoder_steps: int = Field(
        200,
        ge=1,
        description="Training steps of the screen encoder (at most; fewer on a small store: 6 views of each "
        "distinct screenshot, at least 30). Steps, not seconds: a loaded machine trains the same encoder.",
    )
    encoder_max_images: int = Field(
        3000, ge=8, description="Distinct screenshots the encoder trains on (a seeded sample beyond this)."
    )
    batch_size: int = Field(32, ge=1, le=1024, description="Screenshots per ResNet forward pass.")
    threads: int = Field(0, ge=0, le=256, description="torch CPU threads for featurisation; 0: torch's own.")
    dedup_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Cosine similarity above which a trajectory duplicates a kept one. Unset: the "
        "featuriser's own (0.97 for phash, thumb and a resnet_weights checkpoint; a trained screen "
        "encoder's is in its checkpoint). `trajforge curate dedup-eval` chooses one on your pairs.",
    )
    dedup_within_outcome: bool = Field(
        True,
        description="Compare trajectories only with those of the same outcome (successful with "
        "successful, failed with failed), so failures are not dropped as duplicates of successes.",
    )
    dedup_collapse: float = Field(
        0.95,
        gt=0,
        le=1,
        description="Consecutive frames whose features' cosine exceeds this count once in a "
        "trajectory's embedding (scrolling or typing on one screen); 1 counts every frame.",
    )
    dedup_skip_overlays: bool = Field(
        True,
        description="Leave frames a dismissed dialog covered (the screen beneath dimmed by a scrim) "
        "out of a trajectory's embedding, so pop-ups do not hide a duplicate (curation/overlays.py).",
    )
    ivf_min_group: int = Field(
        2048, ge=64, description="Query groups at least this large are searched with an IVF index."
    )
    guidance_pass_rate: float = Field(
        0.34, ge=0, le=1, description="Queries at or below this pass rate (over the round) get guidance."
    )
    guidance_min_rollouts: int = Field(2, ge=1, description="Rollouts a query needs before it gets guidance.")
    hint_styles: list[str] = Field(
        ["cot", "concise", "observe_then_act"],
        min_length=1,
        description="Hint styles of thought synthesis (GUI-Owl §2.2.3), tried in order.",
    )
    thoughts_for: Literal["all", "bottleneck"] = Field(
        "all",
        description="Which accepted steps get thoughts: all, or (with a model) only reasoning bottlenecks, "
        "steps the model gets wrong from the task alone and right with the step's sub-goal "
        "(InfiGUI-R1 §3.1.1). The verdict is recorded on every thought sample either way.",
    )
    point_tolerance: int = Field(
        40, ge=0, le=1000, description="0-1000 units a predicted point may miss by outside any element."
    )
    hold_zero_pass: bool = Field(
        True,
        description="Hold the action samples of a query no rollout has solved out of the published "
        "versions until a later round solves it (Step-GUI §2.1.3).",
    )
    recovery_sites: int = Field(
        48,
        ge=0,
        le=100_000,
        description="Prone-to-error steps probed on a device per round for error-recovery samples "
        "(InfiGUI-R1 §3.2.3; each replays its prefix, so a probe costs a short episode); 0 turns it off.",
    )
    recovery_escapes: int = Field(
        2, ge=1, le=2, description="Escapes tried per probe: press back, then the wrong tap again."
    )
    high_pass_rate: float = Field(0.8, ge=0, le=1, description="Tasks above this are down-sampled.")
    low_pass_rate: float = Field(0.3, ge=0, le=1, description="Tasks below this (but > 0) are up-sampled.")
    downsample_keep: float = Field(0.5, gt=0, le=1, description="Share of a high-pass task's samples kept.")
    upsample_weight: float = Field(2.0, ge=1, le=10, description="Weight of a low-pass task's samples.")
    category_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Target share per sample category (e.g. action_prediction: 0.4); "
        "over-represented categories are down-sampled. Empty: keep the natural mix.",
    )
    seed: int = Field(0, description="Seed of every sampling decision (deterministic reruns).")


class CriticSettings(BaseSettings):
    """Where episode outcomes come from, and how step labels filter action samples."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_CRITICS_", extra="forbid")

    outcome: Literal["anchor", "critic", "anchor_else_critic"] = Field(
        "anchor_else_critic",
        description="anchor: a verifier's or a human's verdict only; critic: the consensus decides what a "
        "human has not (the verifier only calibrates it); anchor_else_critic: an anchor, else the consensus, "
        "where `trust` lets it decide (the rest goes to the human review queue).",
    )
    trust: Literal["error", "precision", "gate"] = Field(
        "error",
        description="error: the largest set of episodes whose published labels' error, at its upper bound, "
        "stays under max_label_error, pooled across tasks (critics/error_control.py); precision: where the "
        "task's estimated precision clears target_precision; gate: every episode of an app whose accuracy "
        "clears trust_accuracy over trust_min_anchored anchors.",
    )
    max_label_error: float = Field(0.02, gt=0, lt=0.5, description="The error `trust: error` keeps under.")
    audit_size: int = Field(8, ge=0, description="Critic-decided episodes a round sends, blind, to people.")
    target_precision: float = Field(0.98, gt=0.5, le=1, description="The precision `trust: precision` keeps.")
    trust_accuracy: float = Field(0.95, gt=0, le=1, description="`trust: gate`: an app's accuracy to clear.")
    trust_min_anchored: int = Field(20, ge=1, description="`trust: gate`: anchored episodes it needs.")
    channels: list[str] = Field(
        default_factory=lambda: ["learned_trajectory", "heuristic_visual", "llm_multimodal"],
        description="Trajectory critics the consensus composes (those that judged an episode and did not "
        "abstain vote): learned_trajectory (fitted on the anchors, judged out of sample), heuristic_visual "
        "(end frames of other queries' successes), llm_multimodal (the model's episode judge).",
    )
    rule: Literal["calibrated", "and", "majority", "weighted"] = Field(
        "calibrated",
        description="How the channels' votes combine: calibrated (each vote weighs its channel's measured "
        "accuracy against the anchors: log-odds, naive Bayes; AND until a channel has "
        "calibration_min_anchored anchored votes), all agree (GUI-Owl), majority, or weighted.",
    )
    calibration_min_anchored: int = Field(
        10,
        ge=1,
        description="Anchored votes a channel needs before the calibrated rule weighs it (the app's own, "
        "else all apps').",
    )
    weights: dict[str, float] = Field(default_factory=dict, description="The weighted rule's, per channel.")
    tau_c: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Action samples need a step score >= tau_c (GOOD 1, NEUTRAL 0.5, HARMFUL 0; GUI-Owl "
        "§2.2.3), from the stored step labels (a model critic's where present).",
    )
    csrs_model_share: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Share of steps whose knowledge answers (CSRS 1-5) a model writes (the critics' request, "
        "on the writer's endpoint and model; else one call per step); the rest keep the template's.",
    )
    judge_window: int = Field(8, ge=1, le=32, description="Steps one model-critic request judges.")


class AnnotationSettings(BaseSettings):
    """Human calibration in Label Studio: where it runs, what is pushed, how verdicts resolve."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_ANNOTATE_", extra="forbid")

    url: str = Field("http://127.0.0.1:8080", description="Label Studio base URL, as trajforge reaches it.")
    api_key: SecretStr | None = Field(
        None, description="A Label Studio access token (Account & Settings > Access Token)."
    )
    project_by: Literal["app", "purpose"] = Field(
        "app", description="app: one project per app; purpose: one project named by `purpose` for everything."
    )
    purpose: str = Field(
        "calibration", min_length=1, max_length=64, description="Project name under project_by=purpose."
    )
    project_prefix: str = Field("trajforge", min_length=1, max_length=64, description="Project title prefix.")
    audit_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of the other episodes pushed at random, so calibration is not only hard cases.",
    )
    low_confidence: float = Field(
        0.6, ge=0, le=1, description="A trajectory verdict scored below this goes to review."
    )
    images: Literal["auto", "upload", "data", "presign", "storage"] = Field(
        "auto",
        description="How the browser gets screenshots: upload (files uploaded to Label Studio), data "
        "(inline data URLs: every task carries its images), presign (presigned S3 URLs), storage (s3:// URIs "
        "resolved by a Label Studio S3 storage connection); auto: upload for the local store, presign "
        "for S3.",
    )
    blind: Literal["audit", "all"] = Field(
        "audit",
        description="Which tasks hide the critics' verdicts and carry no pre-filled labels: audit (the "
        "random audit sample, so calibration is independent) or all.",
    )
    image_max_side: int = Field(
        720, ge=64, le=4096, description="Longest side of a screenshot shown to annotators."
    )
    presign_expiry_h: int = Field(
        168, ge=1, le=168, description="Lifetime of a presigned URL (S3 allows 7 days)."
    )
    storage_endpoint: str | None = Field(
        None,
        description="The S3 endpoint URL as Label Studio reaches it, for images=storage (default: the "
        "trajforge S3 endpoint).",
    )
    resolve: Literal["majority", "latest", "unanimous"] = Field(
        "majority",
        description="How several verdicts on one task become one anchor: majority (ties give no anchor), "
        "latest, or unanimous.",
    )
    seed: int = Field(0, description="Seed of the random audit sample.")
    timeout_s: float = Field(30.0, gt=0, le=600, description="Per-request timeout.")


class EvolveSettings(BaseSettings):
    """The self-evolving loop: how big a round is, what runs it, and when it is scheduled."""

    model_config = SettingsConfigDict(env_prefix="TRAJFORGE_EVOLVE_", extra="forbid")

    rounds: int = Field(6, ge=1, le=1000, description="Rounds `trajforge evolve` brings the loop to.")
    queries_per_app: int = Field(6, ge=1, le=10_000, description="New task queries per app per round.")
    rollouts: int = Field(4, ge=1, le=64, description="Rollouts per query (pass rates need groups).")
    devices: int = Field(2, ge=1, le=256, description="Devices registered in the pool.")
    backend: Literal["sim", "web"] = Field(
        "sim",
        description="Where the loop rolls out: sim (simulated phones) or web (the same apps as pages in "
        "headless Chromium; needs the chromium package and Playwright).",
    )
    max_steps: int = Field(25, ge=1, le=500, description="Step budget of one episode.")
    first_policy: Literal["random-explorer", "vlm"] = Field(
        "random-explorer",
        description="Who rolls out round 1: the random explorer (offline), or vlm, the user's checkpoint "
        "served at llm.base_url as `llm.model`, sent its family's own requests (`policy.family`).",
    )
    device_cooldown_s: float = Field(
        20.0,
        ge=0,
        le=86_400,
        description="A retired device rests this long, then its next lease is a probe: a clean episode "
        "returns it to the pool, a failure retires it again (`trajforge devices` lists and resets them).",
    )
    faults: FaultConfig = Field(
        default_factory=FaultConfig,
        description="Fault drills: per-action rates of device crashes, hangs, slow screens and popups on "
        "the loop's devices (sim and web); all 0 by default.",
    )
    guided_fraction: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Round 1: share of queries (hardest first) that also get one guided demonstration, "
        "the ground-truth path replayed.",
    )
    explore_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Round N > 1: a query of an app (or suite task) that no earlier episode has solved "
        "also gets this share of `rollouts` (rounded up) from the random explorer, beside its K rollouts, "
        "until a first success appears: the trained policy learns only from successes; 0 turns it off.",
    )
    revisit_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Revisits: per app, up to this share of queries_per_app is added to a round from the "
        "previous round's hard queries (pass rate at or below curate.guidance_pass_rate), rolled out "
        "with their guidance; 0 turns revisits off.",
    )
    heldout_per_app: int = Field(
        6,
        ge=0,
        le=10_000,
        description="Held-out evaluation: queries per app sampled once, apart from every round's queries "
        "and never trained on; every policy is rolled out on them (`evolve/heldout.py`). 0: none, and no "
        "promotion gate.",
    )
    heldout_rollouts: int = Field(
        2,
        ge=1,
        le=64,
        description="Rollouts per held-out query (the first greedy), the same seeds for every policy.",
    )
    promote: Literal["gate", "always"] = Field(
        "gate",
        description="gate: a trained policy rolls out the next round only if its held-out success is at "
        "least the current policy's, else the current policy rolls out again (the next round trains a new "
        "candidate on all the data); always: every trained policy is promoted.",
    )
    gate_app_margin: tuple[int, float] = Field(
        (2, 10.0),
        description="[episodes, points]: the gate also refuses a candidate that loses more held-out "
        "successes on any one app (or suite task) than the larger of these, whatever the overall rate, "
        "against the current policy and against round 1's (the random explorer).",
    )
    route_lost_apps: bool = Field(
        True,
        description="A candidate that loses an app (or suite task) held out, beyond gate_app_margin against "
        "the current policy or at all against round 1's, is gated again with each such app handed to "
        "whichever of those two did better there (measured). false: the candidate alone is gated.",
    )
    tier_mix: list[dict[str, float]] = Field(
        default_factory=list,
        description="Curriculum (Step-GUI §2.1.3): the shares of the complexity tiers (localization, "
        "functional, intent) among each round's new queries, one mix per round from round 1, the last "
        "one holding for later rounds; empty: as sampled.",
    )
    seed: int = Field(0, description="Seed of query sampling; rounds use seed + round number.")

    @field_validator("tier_mix")
    @classmethod
    def _mixes(cls, value: list[dict[str, float]]) -> list[dict[str, float]]:
        for i, mix in enumerate(value):
            problem = mix_problem(mix)
            if problem:
                raise ValueError(f"evolve.tier_mix[{i}]: {problem}")
        return value

    def mix_of(self, number: int) -> dict[str, float] | None:
        """The tier mix of round `number` (None: as sampled)."""
        return dict(self.tier_mix[min(number, len(self.tier_mix)) - 1]) if self.tier_mix else None

    dataset: str = Field(
        "trajforge", min_length=1, max_length=128, description="Dataset each round publishes (a plain name)."
    )

    @field_validator("dataset")
    @classmethod
    def _plain_dataset(cls, value: str) -> str:
        problem = dataset_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    filtering: bool = Field(
        True,
        description="false publishes every sample, dropped ones too (no critic, verifier or dedup "
        "filter): the ablation that shows what filtering buys.",
    )
    runner: Literal["thread", "dask"] = Field(
        "thread", description="Prefect task runner of the rollout and featurisation fan-out."
    )
    dask_workers: int = Field(2, ge=1, le=256, description="Workers of the local Dask cluster (runner=dask).")
    dask_address: str | None = Field(None, description="An existing Dask scheduler (tcp://host:8786).")
    shards: int = Field(2, ge=1, le=1024, description="Rollout fan-out: query shards run as parallel tasks.")
    model_calls: int = Field(
        8, ge=1, le=1024, description="Prefect concurrency limit on model-calling tasks."
    )
    schedule: str | None = Field(
        None, description="Cron schedule of `trajforge serve` (e.g. '0 */6 * * *'); none: run on demand."
    )
    work_pool: str = Field("trajforge", min_length=1, description="Prefect work pool of the deployments.")
    prefect_start_timeout_s: int = Field(
        120,
        ge=1,
        le=3600,
        description="Seconds to wait for Prefect's temporary API server when PREFECT_API_URL is unset "
        "(Prefect's own default, 20, is too short on a loaded 2-core machine).",
    )
