"""`trajforge datasets …` end to end on the embedded default."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from tests.support.smoke import smoke_round
from trajforge.settings import load_settings


def test_publish_show_diff_verify_export(tmp_path: Path) -> None:
    run = CliRunner().invoke
    settings = load_settings()
    smoke_round(settings, queries_per_app=1, rollouts=1)
    first = run(app, ["datasets", "publish"])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("dataset trajforge v1: "), first.output  # the loop's publish stage
    smoke_round(settings, queries_per_app=1, rollouts=1)
    second = run(app, ["datasets", "publish", "--rounds", "1,2"])
    assert "trajforge v2 sealed" in second.output and "reused from earlier versions" in second.output
    listed = run(app, ["datasets", "list"]).output.splitlines()
    assert [line.split()[:3] for line in listed] == [
        ["trajforge", "v1", "sealed"],
        ["trajforge", "v2", "sealed"],
    ]
    shown = run(app, ["datasets", "show", "2"]).output
    assert "parent v1" in shown and "lineage: rounds [1, 2]" in shown and "categories:" in shown
    diffed = run(app, ["datasets", "diff", "1", "2"]).output
    assert diffed.startswith("v1 -> v2:") and "added" in diffed and "by reason" in diffed
    verified = run(app, ["datasets", "verify", "2"])
    assert verified.exit_code == 0 and "shards ok" in verified.output
    out = tmp_path / "export"
    exported = run(app, ["datasets", "export", "2", "--format", "sft-sharegpt", "--out", str(out)])
    assert exported.exit_code == 0 and (out / "dataset_info.json").is_file(), exported.output
    missing = run(app, ["datasets", "show", "9"])
    assert missing.exit_code != 0
