"""Dialog-covered frames are found from pixels and left out of a trajectory's embedding."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

from curation.dedup import embed_frames
from curation.overlays import GreyThumbs, overlay_of, settled, thumb
from querygen.pipeline import generate_queries
from rollout.sim.env import SimEnv
from trajforge.actions import Action, ActionKind
from trajforge.appspec import load_app
from trajforge.features import PHashFeaturizer
from trajforge.world.model import POPUP_CLOSE, FaultConfig, Move
from trajforge.world.oracle import actions_for


def _route(popup_rate: float, seed: int = 0) -> tuple[list[bytes], list[bool]]:
    """One shopping query's route on the sim, and for each frame whether a dialog covered it."""
    query = next(iter(generate_queries(load_app("shopping"), 2, seed=3).kept))
    env = SimEnv([load_app("shopping")], faults=FaultConfig(popup_rate=popup_rate, seed=seed))
    env.reset(query)
    frames, covered = [env.last_frame], [env.device.state.popup]

    def record() -> None:
        frames.append(env.last_frame)
        covered.append(env.device.state.popup)

    for action in actions_for(env.device, query.app, [Move.from_json(m) for m in query.path]):
        while env.device.state.popup:
            close = next(e for e in env.device.elements() if e.id == POPUP_CLOSE)
            env.step(Action(kind=ActionKind.CLICK, point=env.device.size.from_px(*close.center)))
            record()
        env.step(action)
        record()
    return frames, covered


def _png(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def test_exactly_the_dialog_covered_sim_frames_are_left_out() -> None:
    frames, covered = _route(popup_rate=0.6)
    assert any(covered) and not all(covered)
    thumbs = dict(zip(frames, GreyThumbs().embed(frames), strict=True))
    kept = settled(frames, thumbs)
    assert kept == [f for f, c in zip(frames, covered, strict=True) if not c]
    clean, _ = _route(popup_rate=0.0)  # the same route without pop-ups
    thumbs.update(zip(clean, GreyThumbs().embed(clean), strict=True))
    vectors = dict(zip(frames + clean, PHashFeaturizer().embed(frames + clean), strict=True))
    left_out = float(embed_frames(frames, vectors, thumbs) @ embed_frames(clean, vectors, thumbs))
    kept_in = float(embed_frames(frames, vectors, None) @ embed_frames(clean, vectors, None))
    assert left_out > 0.97 > kept_in


def _pages() -> tuple[Image.Image, Image.Image, Image.Image]:
    """A web page of text lines, the page under a modal (rgba(0,0,0,.5) backdrop), another page."""
    page = Image.new("RGB", (360, 720), "#ffffff")
    d = ImageDraw.Draw(page)
    for y in range(80, 700, 60):
        d.rectangle((20, y, 300, y + 18), fill="#555555")
    backdrop = Image.blend(page, Image.new("RGB", page.size, "#000000"), 0.5)
    ImageDraw.Draw(backdrop).rectangle((40, 250, 320, 450), fill="#ffffff")
    other = Image.new("RGB", (360, 720), "#ffffff")
    ImageDraw.Draw(other).rectangle((20, 100, 340, 400), fill="#3366cc")
    return page, backdrop, other


def test_a_web_modal_backdrop_is_an_overlay_and_a_new_page_is_not() -> None:
    page, backdrop, other = (thumb(_png(i)) for i in _pages())
    assert overlay_of(backdrop, page)
    assert not overlay_of(page, page)  # the same screen: not darkened
    assert not overlay_of(other, page) and not overlay_of(page, other)
    assert not overlay_of(backdrop, np.zeros_like(page))  # nothing lit to compare against


def test_a_dialog_the_trajectory_leaves_to_another_screen_is_kept() -> None:
    page, backdrop, other = (_png(i) for i in _pages())
    thumbs = dict(zip((page, backdrop, other), GreyThumbs().embed([page, backdrop, other]), strict=True))
    assert settled([page, backdrop, page, other], thumbs) == [page, page, other]  # dismissed
    assert settled([page, backdrop, other], thumbs) == [page, backdrop, other]  # acted in: led on
    assert settled([backdrop, backdrop, page], thumbs) == [page]  # a tap ignored under the dialog
    assert settled([backdrop], thumbs) == [backdrop]  # never empty
