"""Without a CJK font, apps with Chinese text are refused instead of rendered as boxes, and
`trajforge check` says which font it found."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import rollout.sim.render as render
from flows.cli import app
from rollout.sim.farm import SimFarm
from rollout.web.farm import WebFarm
from tests.trajforge.test_appspec import BASE
from trajforge.appspec import load_app, parse_spec
from trajforge.errors import ConfigError


@pytest.fixture
def no_cjk_font(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "CJK_FONTS", ("/nonexistent/wqy-microhei.ttc",))


@pytest.mark.parametrize("farm", [SimFarm, WebFarm])
def test_apps_with_cjk_text_are_refused_without_a_cjk_font(no_cjk_font: None, farm: type) -> None:
    ascii_only = parse_spec(BASE, "mini.yaml")
    farm(apps=[ascii_only])  # nothing to draw that needs one
    with pytest.raises(ConfigError) as info:
        farm(apps=[ascii_only, load_app("ridehail")])
    assert str(info.value) == (
        "apps ridehail show CJK text but no CJK font is installed, so their screens would render as "
        "boxes; install one (apt-get install fonts-wqy-microhei) or leave those apps out"
    )


def test_rollout_stops_before_any_episode(no_cjk_font: None) -> None:
    result = CliRunner().invoke(app, ["rollout", "--app", "ridehail", "--queries", "1"])
    assert isinstance(result.exception, ConfigError) and "no CJK font is installed" in str(result.exception)


def test_check_reports_the_font(monkeypatch: pytest.MonkeyPatch) -> None:
    if render.cjk_font_path() is None:
        pytest.fail("no CJK font here: apt-get install fonts-wqy-microhei (.ci/run installs it)")
    found = CliRunner().invoke(app, ["check"])
    assert found.exit_code == 0 and f"fonts: CJK {render.cjk_font_path()}: ok" in found.output
    monkeypatch.setattr(render, "CJK_FONTS", ())
    missing = CliRunner().invoke(app, ["check"])
    assert missing.exit_code == 1
    assert (
        "fonts: no CJK font, so screens with Chinese text cannot be rendered; apt-get install"
        in missing.output
    )
