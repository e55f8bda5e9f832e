"""The smoke round: the smallest real thing the engine does end to end.

A scripted policy (emitting GUI-Owl `mobile_use` tool calls, one of them malformed)
works a four-screen demo task rendered with Pillow at phone resolution. Outputs go
through the codecs; screenshots are stored content-addressed; steps, judgments,
anchors and exclusions are bulk-written; the verifier checks the final screen.
The app-DAG simulator and the round flow (later issues) replace this module.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw, ImageFont
from sqlalchemy import func, select

from storage.db import engine_from_settings, insert_ignore, session_factory, transaction, upgrade
from storage.models import Anchor, App, Episode, Exclusion, Judgment, Policy, Query, Round, Step
from storage.objectstore import open_object_store, put_blob
from trajforge.actions import DEFAULT_SCREEN, ActionKind, get_codec
from trajforge.errors import ParseError
from trajforge.logs import redact_url
from trajforge.settings import Settings

SCREENS = ("Home", "Search", "Results", "Cart")
NEXT_BUTTON = (140, 1900, 940, 2100)  # pixels: where "Next" sits on every screen
CRITIC = ("screen_change", "0")


def render_screen(
    title: str, width: int = DEFAULT_SCREEN.width, height: int = DEFAULT_SCREEN.height
) -> bytes:
    """A phone screen: status bar, title, body lines, a Next button; PNG bytes."""
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font, small = ImageFont.load_default(size=72), ImageFont.load_default(size=40)
    draw.rectangle((0, 0, width, 90), fill="#222")
    draw.text((30, 20), "12:00", fill="white", font=small)
    draw.text((80, 220), title, fill="black", font=font)
    for i in range(4):
        draw.rectangle((80, 420 + i * 260, width - 80, 620 + i * 260), outline="#888", width=4)
        draw.text((120, 490 + i * 260), f"{title} item {i + 1}", fill="#333", font=small)
    draw.rectangle(NEXT_BUTTON, fill="#1a73e8")
    draw.text((NEXT_BUTTON[0] + 300, NEXT_BUTTON[1] + 60), "Next", fill="white", font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def scripted_outputs(episode: int) -> list[str]:
    """What the scripted policy says; episodes differ so the round has failures to judge."""
    tap = (
        '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[540,2000]}}</tool_call>'
    )
    miss = (
        '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[540,300]}}</tool_call>'
    )
    back = (
        '<tool_call>{"name":"mobile_use","arguments":{"action":"system_button","button":"Back"}}</tool_call>'
    )
    done = (
        '<tool_call>{"name":"mobile_use","arguments":{"action":"terminate","status":"success"}}</tool_call>'
    )
    broken = '<tool_call>{"name":"mobile_use","arguments":{"action":"click","coordinate":[540,'
    variants = [
        [tap, tap, tap, done],
        [tap, broken, tap, tap, done],
        [tap, miss, tap, back, tap, done],
        [tap, tap, done],  # stops one screen early: the verifier fails it
    ]
    return variants[episode % len(variants)]


@dataclass
class SmokeReport:
    round_number: int
    db_url: str
    store: str
    episodes: int = 0
    successes: int = 0
    steps: int = 0
    blobs_written: int = 0
    blobs_deduped: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        lines = [
            f"round {self.round_number}: {self.episodes} episodes, {self.successes} verified successful "
            f"({self.successes / max(self.episodes, 1):.0%}), {self.steps} steps",
            f"screenshots: {self.blobs_written} stored, {self.blobs_deduped} deduplicated by sha256",
            "step labels: " + ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items())),
            "dropped: " + (", ".join(f"{k}={v}" for k, v in sorted(self.reasons.items())) or "none"),
            f"database: {self.db_url}",
            f"objects:  {self.store}",
        ]
        return "\n".join(lines)


def run_smoke_round(settings: Settings, episodes: int = 4) -> SmokeReport:
    """Run one smoke round on the configured database and object store."""
    engine = engine_from_settings(settings)
    upgrade(engine)
    sessions = session_factory(engine)
    store = open_object_store(settings)
    codec = get_codec("qwen")
    where = settings.s3.endpoint if settings.store.backend == "s3" else str(settings.store_path)

    frames: list[str] = []
    report = SmokeReport(0, redact_url(settings.db_url), f"{settings.store.backend} {where}")
    for title in SCREENS:
        digest, written = put_blob(store, render_screen(title))
        frames.append(digest)
        report.blobs_written += written
        report.blobs_deduped += not written

    with transaction(sessions) as s:
        app = s.scalars(select(App).where(App.name == "demo")).first()
        if app is None:
            spec = {"screens": list(SCREENS)}
            app = App(name="demo", spec=spec, spec_sha256=hashlib.sha256(str(spec).encode()).hexdigest())
            s.add(app)
        policy = s.scalars(select(Policy).where(Policy.name == "scripted", Policy.version == 0)).first()
        if policy is None:
            policy = Policy(name="scripted", version=0, meta={"format": codec.name})
            s.add(policy)
        s.flush()
        number = (s.scalar(select(func.max(Round.number))) or 0) + 1
        rnd = Round(number=number, policy_id=policy.id)
        s.add(rnd)
        quid = hashlib.sha256(b"demo:reach the cart").hexdigest()
        query = s.scalars(select(Query).where(Query.uid == quid)).first()
        if query is None:
            query = Query(
                uid=quid,
                app_id=app.id,
                instruction="Open the cart",
                path=list(SCREENS),
                goal={"screen": SCREENS[-1]},
            )
            s.add(query)
        s.flush()
        report.round_number = number

        for attempt in range(episodes):
            uid = hashlib.sha256(f"{number}:{quid}:{attempt}".encode()).hexdigest()
            ep = Episode(
                uid=uid,
                round_id=rnd.id,
                query_id=query.id,
                policy_id=policy.id,
                attempt=attempt,
                device="smoke-0",
            )
            s.add(ep)
            s.flush()
            steps: list[dict[str, Any]] = []
            screen, finished = 0, False
            for index, raw in enumerate(scripted_outputs(attempt)):
                before, action, error = screen, None, None
                try:
                    action = codec.parse(raw, DEFAULT_SCREEN)
                except ParseError as exc:
                    error = exc.reason
                if action is not None and action.kind == ActionKind.CLICK:
                    x, y = DEFAULT_SCREEN.to_px(action.point or (0, 0))
                    hit = NEXT_BUTTON[0] <= x <= NEXT_BUTTON[2] and NEXT_BUTTON[1] <= y <= NEXT_BUTTON[3]
                    screen = min(screen + hit, len(SCREENS) - 1)
                elif action is not None and action.kind == ActionKind.PRESS and action.key == "back":
                    screen = max(screen - 1, 0)
                finished = action is not None and action.kind == ActionKind.TERMINATE
                steps.append(
                    {
                        "episode_id": ep.id,
                        "index": index,
                        "screenshot": frames[before],
                        "screenshot_after": frames[screen],
                        "width": DEFAULT_SCREEN.width,
                        "height": DEFAULT_SCREEN.height,
                        "raw_output": raw,
                        "parse_error": error,
                        "action": action.model_dump(mode="json", exclude_none=True) if action else None,
                    }
                )
            success = finished and screen == len(SCREENS) - 1
            ep.status, ep.num_steps = "done", len(steps)
            ep.outcome, ep.verifier_success = ("success" if success else "failure"), success
            insert_ignore(s, Step, steps, ["episode_id", "index"])
            step_ids = {
                i: sid for i, sid in s.execute(select(Step.index, Step.id).where(Step.episode_id == ep.id))
            }
            judgments, exclusions = [], []
            for row in steps:
                label = "NEUTRAL" if row["screenshot"] == row["screenshot_after"] else "GOOD"
                if row["parse_error"]:
                    label = "HARMFUL"
                    exclusions.append(
                        {
                            "round_id": rnd.id,
                            "stage": "rollout",
                            "item_type": "step",
                            "item_key": f"{uid}:{row['index']}",
                            "reason": row["parse_error"],
                            "detail": {"raw_output": row["raw_output"]},
                        }
                    )
                    report.reasons[row["parse_error"]] += 1
                report.labels[label] += 1
                judgments.append(
                    {
                        "critic": CRITIC[0],
                        "critic_version": CRITIC[1],
                        "target": "step",
                        "target_id": step_ids[row["index"]],
                        "label": label,
                        "summary": "screen changed" if label == "GOOD" else "no progress",
                    }
                )
            insert_ignore(s, Judgment, judgments, ["critic", "critic_version", "target", "target_id"])
            insert_ignore(s, Exclusion, exclusions, ["stage", "item_type", "item_key", "reason"])
            insert_ignore(
                s,
                Anchor,
                [
                    {
                        "episode_id": ep.id,
                        "source": "verifier",
                        "annotator": "",
                        "label": "success" if success else "failure",
                        "confidence": 1.0,
                    }
                ],
                ["episode_id", "source", "annotator"],
            )
            report.episodes += 1
            report.successes += success
            report.steps += len(steps)
        rnd.status = "done"
        rnd.stats = {
            "episodes": report.episodes,
            "successes": report.successes,
            "steps": report.steps,
            "dropped": dict(report.reasons),
        }
    return report
