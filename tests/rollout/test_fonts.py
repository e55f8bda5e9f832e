"""Without a CJK font, apps with Chinese text are refused instead of rendered as boxes, and
`trajforge check` says which font it found."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import rollout.sim.render as render
from flows.cli import app
from rollout.sim.farm import SimFarm
from rollout.web.farm import WebFarm
from tests.conftest import service_missing
from tests.trajforge.test_appspec import BASE
from trajforge.appspec import load_app, parse_spec
from trajforge.errors import ConfigError


@pytest.fixture
def no_cjk_font(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "CJK_FONTS", ("/nonexistent/wqy-microhei.ttc",))
    monkeypatch.setattr(render, "PACKAGED_CJK_FONT", ("paperang_p2_fonts_cjk", "no/such/font.ttc"))


@pytest.mark.parametrize("farm", [SimFarm, WebFarm])
def test_apps_with_cjk_text_are_refused_without_a_cjk_font(no_cjk_font: None, farm: type) -> None:
    ascii_only = parse_spec(BASE, "mini.yaml")
    farm(apps=[ascii_only])  # nothing to draw that needs one
    with pytest.raises(ConfigError) as info:
        farm(apps=[ascii_only, load_app("ridehail")])
    assert str(info.value) == (
        "apps ridehail show CJK text but no CJK font is installed, so their screens would render as "
        "boxes; reinstall trajforge's dependencies (pip install -e .), which bring one, or apt-get install "
        "fonts-wqy-microhei, or leave those apps out"
    )


def test_rollout_stops_before_any_episode(no_cjk_font: None) -> None:
    result = CliRunner().invoke(app, ["rollout", "--app", "ridehail", "--queries", "1"])
    assert isinstance(result.exception, ConfigError) and "no CJK font is installed" in str(result.exception)


def test_check_reports_the_font(monkeypatch: pytest.MonkeyPatch) -> None:
    if render.cjk_font_path() is None:
        pytest.fail("no CJK font here: the dependency paperang-p2-fonts-cjk brings one (pip install -e .)")
    found = CliRunner().invoke(app, ["check"])
    assert found.exit_code == 0 and f"fonts: CJK {render.cjk_font_path()}: ok" in found.output
    monkeypatch.setattr(render, "CJK_FONTS", ())
    monkeypatch.setattr(render, "PACKAGED_CJK_FONT", ("no_such_font_package", "x.ttc"))
    missing = CliRunner().invoke(app, ["check"])
    assert missing.exit_code == 1
    assert "fonts: no CJK font, so screens with Chinese text cannot be rendered; reinstall" in missing.output


def test_the_font_comes_with_the_python_dependencies(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without any system CJK font (no apt-get) still draws Chinese glyphs, not boxes."""
    from PIL import ImageFont

    monkeypatch.setattr(render, "CJK_FONTS", ("/nonexistent/wqy-microhei.ttc",))
    path = render.cjk_font_path()
    assert path is not None and path == render.packaged_cjk_font()
    font = ImageFont.truetype(path, 32)
    glyphs = {bytes(font.getmask(ch)) for ch in "打车外卖设置"}
    assert len(glyphs) == 6  # a missing glyph draws one and the same box for every character
    SimFarm(apps=[load_app("ridehail")])  # accepted, with no system font


def _glyph_shots(env: dict) -> list[bytes]:
    """Screenshots of two different Chinese words, drawn by Chromium with `env`."""
    from playwright.sync_api import sync_playwright

    from rollout.web.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, env=env)
        page = browser.new_page()
        page.set_content(
            '<div id="a" style="font:40px sans-serif">打车</div><div id="b" style="font:40px sans-serif">外卖</div>'
        )
        shots = [page.locator(f"#{i}").screenshot() for i in ("a", "b")]
        browser.close()
    return shots


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_draws_chinese_with_the_font_the_dependencies_bring(tmp_path: Path) -> None:
    """The web backend's Chromium sees the packaged font through its own fontconfig file, so a
    machine without a system CJK font (as .ci/run leaves it) still shows Chinese, not boxes."""
    import os
    import subprocess

    from rollout.web.env import chromium_available, chromium_env

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium; pip install playwright)")
    with_font = _glyph_shots(chromium_env())
    assert with_font[0] != with_font[1]  # two words, two drawings
    system_cjk = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout.strip()
    if not system_cjk:  # without the packaged font, this machine would draw the same boxes twice
        bare = tmp_path / "fonts.conf"
        bare.write_text(
            '<?xml version="1.0"?>\n<fontconfig><include ignore_missing="yes">/etc/fonts/fonts.conf</include></fontconfig>\n'
        )
        boxes = _glyph_shots({**os.environ, "FONTCONFIG_FILE": str(bare)})
        assert boxes[0] == boxes[1]
