"""A GUI screen encoder for trajectory dedup: a ResNet trained on the store's own screenshots.

AgentCPM-GUI §3.4 embeds screenshots with ResNet-50. No pretrained weights can be fetched
here, and ImageNet features are not made for telling one app screen from another, so the
engine trains its own: a small transformers `ResNetModel`, self-supervised (SimCLR's
NT-Xent loss) on the screenshots the farm produced. Two views of one screenshot are pulled
together and views of other screenshots pushed apart. The views differ by what changes
between two recordings of the same trajectory on a phone:

- a pop-up: the screen dimmed by a scrim under a dialog;
- a scroll offset: the content between the app bar and the nav bar moved;
- list contents: some rows replaced by other rows of the screen (a feed that changed);
- the status bar: another clock, other icons;
- small shifts, scale and colour changes (another device, another theme).

(`curation.augment`: a page, such as a MiniWoB++ task or a browser's viewport, gets the same
views without the status bar.) So the features keep what identifies a screen (its layout,
controls) and drop what does not. At 128x256 a screen's title is a few pixels high, and
screens that differ only in their title (Settings' "System" and "Display") would look alike,
so the same network also learns a second view: the app bar below the status bar at 384x48
(`AppBar`), its views differing by a dialog's scrim, shifts and colour. A frame's vector joins
the two, each centred on its training mean (`trajforge.features.ResNetFeaturizer`). Both views
are standardised per image, which divides a scrim's uniform dimming out. Training runs on CUDA
when there is one, else on the CPU threads given, for a budget of steps sized to the data
(`EncoderSpec.planned_steps`: 6 views of each distinct screenshot, 30 to `curate.encoder_steps`).
The budget counts steps, never seconds: the same screenshots and seed train the same encoder on an
idle machine and on a loaded one, so dedup, and every dataset version after it, are the same bytes.
"""

from __future__ import annotations

import io
import json
import logging
import math
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from curation.augment import augment, bar_augment, screen_kind
from storage.encoders import StoredEncoder, latest_encoder, save_encoder
from storage.models import Episode, Round, Step
from storage.objectstore import ObjectStore
from trajforge.errors import ConfigError
from trajforge.features import SIDECAR, AppBar, pooled, screen_and_bar, standardised
from trajforge.progress import track
from trajforge.stage_settings import CurationSettings
from trajforge.stopping import check_stop


@dataclass(frozen=True)
class EncoderSpec:
    """The encoder's shape and training budget."""

    width: int = 128  # input pixels; phone screens are portrait
    height: int = 256
    hidden: tuple[int, ...] = (32, 64, 128, 256)
    depths: tuple[int, ...] = (1, 1, 1, 1)
    batch: int = 48  # screenshots per step (two views each), and as many app bars
    temperature: float = 0.2
    lr: float = 2e-3
    steps: int = 200  # curate.encoder_steps: the most steps, whatever the data
    epochs: float = 6.0  # the budget: views of each distinct screenshot (two per step it is drawn in) ...
    min_steps: int = 30  # ... but at least this many steps
    seed: int = 0
    rows: int = 1  # the feature map average-pooled into this many horizontal bands (1: pooler output)
    bar: tuple[float, float] = (0.035, 0.11)  # the app bar's band (fractions of the height); see AppBar
    bar_width: int = 384  # the band's input pixels: the title legible
    bar_height: int = 48
    bar_weight: float = 8.0  # the bar's share beside the screen's in a frame's vector
    bar_cells: int = 6  # the bar's features pooled into this many cells left to right (see AppBar)
    threshold: float = 0.998  # dedup's default cosine with this encoder (bench_dedup_quality's tuning set)

    def planned_steps(self, distinct: int) -> int:
        """The training budget sized to the data: `epochs` passes over the distinct screenshots,
        between `min_steps` and `steps`."""
        return min(self.steps, max(self.min_steps, math.ceil(self.epochs * distinct / self.batch)))

    def resnet_config(self) -> Any:
        from transformers import ResNetConfig

        return ResNetConfig(
            embedding_size=self.hidden[0],
            hidden_sizes=list(self.hidden),
            depths=list(self.depths),
            layer_type="basic",
        )


@dataclass(frozen=True)
class TrainReport:
    images: int
    steps: int
    seconds: float
    loss_first: float
    loss_last: float
    device: str
    images_per_s: float  # augmented views through forward and backward, per second
    kind: str = "phone"  # the screens' kind, which chose the augmentations (`curation.augment`)
    planned: int = 0  # the steps the budget allowed (`EncoderSpec.planned_steps`)

    def render(self) -> str:
        return (
            f"encoder: {self.steps} steps (of {self.planned} planned) on {self.images} {self.kind} "
            f"screenshots in {self.seconds:.0f}s "
            f"on {self.device} ({self.images_per_s:.0f} views/s), "
            f"loss {self.loss_first:.3f} -> {self.loss_last:.3f}"
        )


log = logging.getLogger("trajforge.encoder")


class TooFewScreenshots(ConfigError):
    """Contrastive training needs a batch of distinct screenshots."""


# ---- training ---------------------------------------------------------------------------


def nt_xent(z: Any, temperature: float) -> Any:
    """SimCLR's loss over 2N views where view i and view i+N come from one screenshot."""
    import torch
    import torch.nn.functional as F

    z = F.normalize(z, dim=1)
    n = z.shape[0] // 2
    logits = z @ z.T / temperature
    logits.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(logits, target)


def _bar(spec: EncoderSpec, centres: tuple[np.ndarray, np.ndarray] = (np.zeros(1), np.zeros(1))) -> AppBar:
    top, bottom = spec.bar
    screen, bar = (tuple(float(x) for x in c) for c in centres)
    return AppBar(top, bottom, spec.bar_width, spec.bar_height, spec.bar_weight, screen, bar, spec.bar_cells)


def train_encoder(
    images: Sequence[bytes], spec: EncoderSpec = EncoderSpec(), device: str | None = None, threads: int = 0
) -> tuple[Any, TrainReport, AppBar]:
    """A `ResNetModel` trained on `images` (PNG bytes), on whole screens and on their app bars (one
    loss each), for `spec.planned_steps` steps. Also the app bar view with its centres."""
    import torch
    from transformers import ResNetModel

    distinct = list(dict.fromkeys(images))
    if len(distinct) < 8:
        raise TooFewScreenshots(
            "training the screen encoder needs at least 8 distinct screenshots; the store has "
            f"{len(distinct)}. Run a round first, or set curate.featurizer to phash"
        )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if threads:
        torch.set_num_threads(threads)
    rng = random.Random(spec.seed)
    torch.manual_seed(spec.seed)
    opened, bases, view, bars = _training_views(distinct, spec)
    kind, planned = screen_kind(opened), spec.planned_steps(len(distinct))
    model = ResNetModel(spec.resnet_config())
    torch.nn.Module.to(model, device).train()
    losses, seconds = _fit(model, replace(spec, steps=planned), device, rng, (bases, bars, view), kind)
    model = model.eval()
    sample = random.Random(spec.seed).sample(opened, min(len(opened), 512))  # the features' centres
    screens, titles = screen_and_bar(model, device, sample, (spec.width, spec.height), view, 64, spec.rows)
    head, tail = losses[: max(1, len(losses) // 10)], losses[-max(1, len(losses) // 10) :]
    batch = min(spec.batch, len(bases))
    report = TrainReport(
        images=len(distinct),
        steps=len(losses),
        seconds=round(seconds, 1),
        loss_first=round(float(np.mean(head)), 4),
        loss_last=round(float(np.mean(tail)), 4),
        device=device,
        images_per_s=round(2 * (batch + min(spec.batch, len(bars))) * len(losses) / max(seconds, 1e-9), 1),
        kind=kind,
        planned=planned,
    )
    return model.cpu(), report, _bar(spec, (screens.mean(axis=0), titles.mean(axis=0)))


def _training_views(
    distinct: list[bytes], spec: EncoderSpec
) -> tuple[list[Image.Image], list[Image.Image], AppBar, list[Image.Image]]:
    """The screens (as opened, and resized for augmenting), the app bar view, and one bar per title."""
    work = (spec.width * 2, spec.height * 2)  # augment at twice the input size, then downsample
    opened = [Image.open(io.BytesIO(png)).convert("RGB") for png in distinct]
    bases = [img.resize(work, Image.Resampling.BOX) for img in opened]
    view = _bar(spec)  # the app bar's band and pooling, as inference crops and pools it
    bars = list({np.asarray(b).tobytes(): b for b in map(view.crop, opened)}.values())  # one per title
    bars = [b.resize((view.width * 2, view.height * 2), Image.Resampling.BOX) for b in bars]
    return opened, bases, view, bars


def _fit(
    model: Any,
    spec: EncoderSpec,
    device: str,
    rng: random.Random,
    data: tuple[list[Image.Image], list[Image.Image], AppBar],
    kind: str = "phone",
) -> tuple[list[float], float]:
    """`spec.steps` contrastive steps on screens and app bars: the losses and the seconds taken (a
    figure for the report; nothing depends on it)."""
    import torch

    bases, bars, view = data
    optimiser = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=1e-4)

    def loss_on(
        pool: list[Image.Image], aug: Callable[..., Image.Image], size: tuple[int, int], grid: tuple[int, int]
    ) -> Any:
        picks = rng.sample(range(len(pool)), min(spec.batch, len(pool)))
        views = [aug(pool[i], rng) for i in picks] + [aug(pool[i], rng) for i in picks]
        pixels = torch.from_numpy(np.stack([standardised(v, size) for v in views])).to(device)
        return nt_xent(pooled(model, pixels, grid), spec.temperature)

    losses: list[float] = []
    start = time.perf_counter()
    with track("encoder training steps", spec.steps) as advance:
        for step in range(spec.steps):
            check_stop()
            done = step / spec.steps  # warm up, then a cosine decay over the steps
            warm = min(1.0, (step + 1) / 20)
            for group in optimiser.param_groups:
                group["lr"] = spec.lr * warm * 0.5 * (1 + math.cos(math.pi * done))
            loss = loss_on(bases, partial(augment, kind=kind), (spec.width, spec.height), (spec.rows, 1))
            if len(bars) >= 2:  # an app whose screens share one bar has nothing to tell apart there
                loss = loss + loss_on(bars, bar_augment, (view.width, view.height), view.grid)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
            advance()
    return losses, time.perf_counter() - start


def write_checkpoint(model: Any, spec: EncoderSpec, report: TrainReport, bar: AppBar, folder: Path) -> None:
    """A checkpoint `ResNetFeaturizer.load` reads: transformers' files plus the input size, the app
    bar view and the default dedup threshold."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model.save_pretrained(folder)
    facts = {
        "width": spec.width,
        "height": spec.height,
        "rows": spec.rows,
        "bar": asdict(bar),
        "threshold": spec.threshold,
        "spec": asdict(spec),
        "training": asdict(report),
    }
    (folder / SIDECAR).write_text(json.dumps(facts, indent=2, sort_keys=True))


def store_screenshots(
    sessions: sessionmaker[Session], up_to_round: int | None, limit: int, seed: int = 0
) -> list[str]:
    """Distinct screenshot hashes of the stored episodes (of rounds up to this id), a seeded sample."""
    query = select(Step.screenshot).distinct()
    if up_to_round is not None:
        query = query.join(Episode, Episode.id == Step.episode_id).where(Episode.round_id <= up_to_round)
    with sessions() as s:
        hashes = sorted(s.scalars(query))
    return sorted(random.Random(seed).sample(hashes, limit)) if len(hashes) > limit else hashes


def train_store_encoder(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    frames: Callable[[str], bytes],
    settings: CurationSettings,
    round_id: int | None = None,
    device: str | None = None,
) -> tuple[StoredEncoder, TrainReport]:
    """Train the screen encoder on the store's screenshots (through `round_id`) and store it, for at
    most `curate.encoder_steps` steps."""
    spec = EncoderSpec(steps=settings.encoder_steps)
    hashes = store_screenshots(sessions, round_id, settings.encoder_max_images)
    model, report, bar = train_encoder([frames(h) for h in hashes], spec, device, settings.threads)
    with tempfile.TemporaryDirectory(prefix="trajforge-encoder-") as folder:
        write_checkpoint(model, spec, report, bar, Path(folder))
        facts = json.loads((Path(folder) / SIDECAR).read_text())  # the row records what the sidecar says
        return save_encoder(sessions, store, Path(folder), round_id, facts), report


def round_encoder(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    frames: Callable[[str], bytes],
    settings: CurationSettings,
    number: int,
) -> dict[str, Any]:
    """The screen encoder round `number`'s dedup uses: trained once, on the rounds before it, when
    none is stored. Round 1 has no earlier screenshots, so its dedup falls back to phash."""
    if settings.featurizer != "resnet" or settings.resnet_weights:
        return {"featurizer": settings.featurizer, "source": "settings"}
    stored = latest_encoder(sessions)
    if stored is not None:
        return {"featurizer": "resnet", "source": "stored", "encoder": stored.sha256[:16]}
    with sessions() as s:
        before = s.scalar(select(func.max(Round.id)).where(Round.number < number))
    if before is None:
        return {"featurizer": "phash", "source": "fallback", "reason": "no_screenshots_before_this_round"}
    try:
        stored, report = train_store_encoder(sessions, store, frames, settings, before)
    except TooFewScreenshots as exc:  # a tiny first round: dedup stays on phash until there are more
        log.info("%s", exc)
        return {"featurizer": "phash", "source": "fallback", "reason": "too_few_screenshots"}
    log.info("%s", report.render())
    return {"featurizer": "resnet", "source": "trained", "encoder": stored.sha256[:16], **asdict(report)}
