"""Exported answers checked with each model family's own parsing rules, and scored by the rewards.

The rules are those of the reference parsers: qwen-agent's `<tool_call>\\n{json}\\n</tool_call>`
extraction, the `ui-tars` package's `parse_action_to_structure_output` (it asserts "Action:",
splits on "Action: " and reads the call with `ast`), AgentCPM-GUI's action JSON schema, and
Mobile-R1's `<think>`/`<action>`/`<tool_call>` tags. The rl-verl ground truth of every row must
score 1.0 through `trajforge/rewards.py`, and through verl's own loader where verl is installed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from publish.exports import export
from tests.conftest import service_missing
from trajforge.actions.space import UITARS15, smart_resize
from trajforge.rewards import compute_score

FORMATS = ["qwen", "uitars", "uitars15", "agentcpm", "mobiler1"]
# SFT exports downscale the 1080x2400 screenshots to 450x1000; rl-verl keeps them as they are.
SMALL, FULL = (450, 1000), (1080, 2400)
MOBILE_USE = {"click", "long_press", "swipe", "type", "system_button", "open", "wait", "answer", "terminate"}
UITARS_MOBILE = {"click", "long_press", "type", "scroll", "drag", "open_app", "press_home", "press_back"}
UITARS_MOBILE |= {"wait", "finished", "call_user"}
AGENTCPM_SCHEMA = {  # AgentCPM-GUI's action space (seed 000 §3.2), as its repository's schema states it
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "thought": {"type": "string"},
        "POINT": {"$ref": "#/$defs/point"},
        "to": {"oneOf": [{"enum": ["up", "down", "left", "right"]}, {"$ref": "#/$defs/point"}]},
        "duration": {"type": "integer", "minimum": 0},
        "TYPE": {"type": "string"},
        "PRESS": {"enum": ["HOME", "BACK", "ENTER"]},
        "STATUS": {"enum": ["continue", "finish", "satisfied", "impossible", "interrupt", "need_feedback"]},
    },
    "dependentRequired": {"to": ["POINT"]},
    "$defs": {
        "point": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 1000},
            "minItems": 2,
            "maxItems": 2,
        }
    },
}


def _in(point: list[int], size: tuple[int, int]) -> bool:
    return 0 <= point[0] <= size[0] and 0 <= point[1] <= size[1]


def check_tool_call(text: str, size: tuple[int, int]) -> None:
    """qwen-agent: the JSON between `<tool_call>\\n` and `\\n</tool_call>` is the call."""
    calls = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
    assert len(calls) == 1, text
    call = json.loads(calls[0])
    assert call["name"] == "mobile_use" and call["arguments"]["action"] in MOBILE_USE
    for key in ("coordinate", "coordinate2"):
        if key in call["arguments"]:
            assert _in(call["arguments"][key], smart_resize(*size)), (key, text)


def check_uitars(text: str, absolute: bool, size: tuple[int, int]) -> None:
    """The `ui-tars` parser's rules."""
    assert "Action:" in text
    if text.startswith("Thought:"):
        assert re.search(r"Thought: (.+?)(?=\s*Action: |$)", text, re.S)
    call = ast.parse(text.split("Action: ")[-1], mode="eval").body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
    assert call.func.id in UITARS_MOBILE, text
    for kw in call.keywords:
        assert isinstance(kw.value, ast.Constant)
        if kw.arg in ("start_box", "end_box"):
            x, y = map(int, re.fullmatch(r"\((\d+),(\d+)\)", str(kw.value.value)).groups())  # type: ignore[union-attr]
            assert _in([x, y], smart_resize(*size, UITARS15) if absolute else (1000, 1000)), text


def check_answer(fmt: str, text: str, size: tuple[int, int]) -> None:
    if fmt == "qwen":
        assert re.fullmatch(r"(<think>[^<]+</think>\n)?<tool_call>\n.*\n</tool_call>", text, re.S), text
        check_tool_call(text, size)
    elif fmt == "mobiler1":
        tags = re.fullmatch(r"<think>(.+?)</think>\n<action>(.+?)</action>\n(<tool_call>.*)", text, re.S)
        assert tags and tags[1].strip() and tags[2].strip(), text
        check_tool_call(tags[3], size)
    elif fmt in ("uitars", "uitars15"):
        check_uitars(text, fmt == "uitars15", size)
    else:
        jsonschema.validate(json.loads(text), AGENTCPM_SCHEMA)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """SQLite only: what is checked here is the text of the answers, the same on every database."""
    return f"sqlite:///{tmp_path / 'test.db'}"


# What each format's system prompt says when it asks for a thought, and how its answer carries one.
ASKS_THOUGHT = {"qwen": "<think>", "mobiler1": "<think>", "uitars": "Thought:", "uitars15": "Thought:"}
ASKS_THOUGHT["agentcpm"] = '"thought" field'
HAS_THOUGHT = {
    "qwen": lambda a: a.startswith("<think>"),
    "mobiler1": lambda a: a.startswith("<think>"),
    "uitars": lambda a: a.startswith("Thought:"),
    "uitars15": lambda a: a.startswith("Thought:"),
    "agentcpm": lambda a: "thought" in json.loads(a),
}


def check_sft(version, out: Path, fmt: str, thoughts: str = "recorded") -> None:
    """Every action row is written, passes its family's parser, and its prompt asks for a thought
    exactly when its answer has one (`thoughts="always"`: every answer has one)."""
    _, sessions, store, rows = version
    report = export(
        sessions, store, "gui", 1, "sft-sharegpt", str(out), fmt, 1000, weights="keep", thoughts=thoughts
    )
    actions = {u for u, r in rows.items() if json.loads(r["payload"]).get("action")}
    answered, thoughtful, recorded = 0, 0, 0
    for path in out.glob("gui_v1_*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            system, answer = record["messages"][0]["content"], record["messages"][-1]["content"]
            if record["meta"]["uid"] in actions:
                check_answer(fmt, answer, SMALL)
                answered += 1
                recorded += bool(json.loads(rows[record["meta"]["uid"]]["payload"]).get("thought"))
                has = HAS_THOUGHT[fmt](answer)
                thoughtful += has
                assert (ASKS_THOUGHT[fmt] in system) == has, (fmt, answer)
            elif fmt != "mobiler1":  # a knowledge row's answer is no action: no thought asked
                assert ASKS_THOUGHT[fmt] not in system
    # Every action row is kept, but one the format's action space has no word for (UI-TARS-1's mobile space)
    assert all(r.startswith("action_not_representable:") for r in report.skipped), report.skipped
    assert answered + sum(report.skipped.values()) == len(actions)
    assert thoughtful == (answered if thoughts == "always" or fmt == "mobiler1" else thoughtful)
    assert report.offline_thoughts == thoughtful - recorded


def test_a_thought_bearing_agentcpm_export_passes_agentcpm_guis_schema_with_thought_required(
    version, tmp_path: Path
) -> None:
    check_sft(version, tmp_path / "always", "agentcpm", thoughts="always")
    schema = {**AGENTCPM_SCHEMA, "required": ["thought"]}
    for path in (tmp_path / "always").glob("gui_v1_*.jsonl"):
        for line in path.read_text().splitlines():
            answer = json.loads(line)["messages"][-1]["content"]
            if answer.startswith("{") and any(k in answer for k in ("POINT", "TYPE", "PRESS", "STATUS")):
                jsonschema.validate(json.loads(answer), schema)


def _verl_rows(version, out: Path, fmt: str) -> list[dict]:
    _, sessions, store, _ = version
    export(sessions, store, "gui", 1, "rl-verl", str(out), fmt)
    return [r for split in ("train", "val") for r in pl.read_parquet(out / f"{split}.parquet").to_dicts()]


def test_every_format_passes_its_family_parser_and_its_ground_truth_scores_one(
    version, tmp_path: Path
) -> None:
    for fmt in FORMATS:
        check_sft(version, tmp_path / f"sft-{fmt}", fmt)
        rows = _verl_rows(version, tmp_path / f"verl-{fmt}", fmt)
        assert rows, fmt
        for row in rows:
            gt = row["reward_model"]["ground_truth"]
            formatted = json.loads(gt)["formatted"]
            check_answer(fmt, formatted, FULL)
            for scheme in ("binary", "dense", "mobiler1"):
                result = compute_score(row["data_source"], formatted, gt, row["extra_info"], scheme)
                assert result["score"] == 1.0, (fmt, scheme, formatted)
            assert compute_score(row["data_source"], "tap it", gt, row["extra_info"])["score"] == -1.0


def _verl_python() -> str | None:
    path = os.environ.get("TRAJFORGE_TEST_VERL_PYTHON") or str(
        Path.home() / ".cache/trajforge/verl-0.9.1/bin/python"
    )
    return path if Path(path).is_file() else None


@pytest.mark.slow
def test_verl_loads_the_reward_function_and_scores_the_export(version, tmp_path: Path) -> None:
    python = _verl_python()
    if python is None:
        service_missing("verl 0.9.1 is not installed (TRAJFORGE_TEST_VERL_PYTHON; .ci/run installs it)")
    assert python is not None
    rows = _verl_rows(version, tmp_path / "export", "qwen")
    cases = [
        {
            "data_source": r["data_source"],
            "ground_truth": r["reward_model"]["ground_truth"],
            "extra_info": r["extra_info"],
            "answers": [json.loads(r["reward_model"]["ground_truth"])["formatted"], "I tap the button."],
        }
        for r in rows
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    script = f"""
import json
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
import trajforge.rewards as rewards
out = {{}}
for scheme in ("binary", "dense"):
    config = OmegaConf.create({{"reward": {{"custom_reward_function": {{
        "path": rewards.__file__ if scheme == "binary" else "pkg://trajforge.rewards",
        "name": "compute_score", "reward_kwargs": {{"scheme": scheme}}}}}}}})
    fn = get_custom_reward_fn(config)
    out[scheme] = [[fn(data_source=c["data_source"], solution_str=a, ground_truth=c["ground_truth"],
                       extra_info=c["extra_info"])["score"] for a in c["answers"]]
                   for c in json.load(open({str(tmp_path / "cases.json")!r}))]
print(json.dumps(out))
"""
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [python, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": repo},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    for scheme in ("binary", "dense"):
        assert scores[scheme] == [[1.0, -1.0]] * len(cases), scheme
    assert sys.executable != python  # verl ran in its own environment, not ours
