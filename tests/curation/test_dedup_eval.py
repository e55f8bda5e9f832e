"""`trajforge curate dedup-eval`: precision and recall per threshold on the user's labelled pairs,
measured on simulator screenshots; a bad pairs file is one error naming its line."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from querygen.pipeline import generate_queries
from rollout.sim.env import SimEnv
from tests.flows.test_bad_input import one_line_error
from tests.flows.test_cli import cli
from trajforge.appspec import load_app
from trajforge.domain import Query
from trajforge.world.model import Move
from trajforge.world.oracle import actions_for


def _play(folder: Path, query: Query) -> list[str]:
    apps = [load_app("shopping")]
    env = SimEnv(apps)
    env.reset(query)
    frames = [env.last_frame]
    for action in actions_for(env.device, query.app, [Move.from_json(m) for m in query.path]):
        env.step(action)
        frames.append(env.last_frame)
    folder.mkdir(parents=True)
    for i, png in enumerate(frames):
        (folder / f"{i}.png").write_bytes(png)
    return [f"{folder.name}/{i}.png" for i in range(len(frames))]


def test_dedup_eval_prints_precision_recall_per_threshold_and_the_chosen_one(tmp_path: Path) -> None:
    queries = list(generate_queries(load_app("shopping"), 4, seed=3).kept)[:3]
    trajs = {f"q{i}": _play(tmp_path / f"q{i}", q) for i, q in enumerate(queries)}
    again = _play(tmp_path / "q0-again", queries[0])  # the same route replayed: a duplicate
    rows = [
        {"a": trajs["q0"], "b": again, "duplicate": True},
        {"a": trajs["q0"], "b": trajs["q1"], "duplicate": False},
        {"a": trajs["q1"], "b": trajs["q2"], "duplicate": False},
    ]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    done = cli("curate", "dedup-eval", "--pairs", str(pairs), "--featurizer", "phash", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "3 pairs (1 duplicate, 2 distinct" in out and "featurizer phash:64:1" in out
    assert "threshold  precision  recall  F1" in out
    assert "threshold in use 0.97 (the featuriser's own): precision 1.00 recall 1.00" in out
    chosen = out.strip().splitlines()[-1]
    assert (
        chosen.startswith("chosen: ") and "recall 1.00" in chosen and "set curate.dedup_threshold" in chosen
    )


def test_a_bad_pairs_file_is_one_error_naming_the_line(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    Image.new("RGB", (8, 16)).save(tmp_path / "x.png")
    Image.new("RGB", (8, 16)).save(tmp_path / "y.png")
    (tmp_path / "notes.png").write_text("not a picture")

    def refused(text: str, *fragments: str) -> None:
        pairs.write_text(text)
        one_line_error(cli("curate", "dedup-eval", "--pairs", str(pairs), cwd=tmp_path), *fragments)

    ok = '{"a": ["x.png"], "b": ["y.png"], "duplicate": true}\n'
    refused(ok + '{"a": ["x.png"]}\n', f"{pairs}:2", '"duplicate"')
    refused(ok + "{not json\n", f"{pairs}:2", "not JSON")
    refused(
        '{"a": ["x.png"], "b": ["notes.png"], "duplicate": true}\n', f"{pairs}:1", "notes.png", "not an image"
    )
    refused('{"a": ["x.png"], "b": ["gone.png"], "duplicate": true}\n', f"{pairs}:1", "gone.png")
    refused(ok, "both duplicate and distinct pairs")


def test_written_pairs_read_back_the_same_with_each_screenshot_stored_once(tmp_path: Path) -> None:
    from curation.dedup_eval import Pair, read_pairs, write_pairs

    queries = list(generate_queries(load_app("shopping"), 4, seed=3).kept)[:2]
    a, b = (
        tuple((tmp_path / f).read_bytes() for f in _play(tmp_path / f"q{i}", q))
        for i, q in enumerate(queries)
    )
    pairs = [Pair(a, a, True, "replay"), Pair(a, b, False, "other route")]
    written = write_pairs(pairs, tmp_path / "set")
    assert read_pairs(written) == pairs
    assert len(list((tmp_path / "set" / "frames").iterdir())) == len(set(a) | set(b))
