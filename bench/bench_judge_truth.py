"""The episode judge's accuracy against a scripted truth: one request per window of steps, against
one request per step (the step critic's granularity before the judge, `--window 1`), in one run.

Episodes come from the evaluation set (`bench.evalset`: the noisy oracle, exact step labels from the
simulator's hidden state, the verifier's verdict). The scripted server plays a model that knows that
truth and is wrong on a share of its answers (`--error`, drawn per step from a hash, so every window
size gets the same answers): per step its label, a `self_reflection` that begins with it and a
`state_verification`, and per episode its verdict. What the judge then keeps, per step and episode,
is scored against the truth and against what the server said: a judge that loses or misplaces
nothing scores what the server scores, whatever the window.
Usage: python -m bench.bench_judge_truth [--per-app 5 --error 0.1 --window 8]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common import table
from bench.evalset import EvalEpisode, build_eval_set
from critics.llm import KNOWLEDGE, LLMEpisodeJudge, knowledge
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from tests.support.scripted_llm import Recorded, Reply, ScriptedLLM
from trajforge.appspec import builtin_app_names, load_app
from trajforge.gateway import LLMGateway
from trajforge.settings import LLMSettings

LABELS = ("GOOD", "NEUTRAL", "HARMFUL")
TAG = re.compile(r"\[ep-(\d+)\]")


# its smoke mode, the arguments of its smallest sizes: tests/test_benches.py runs it so
SMOKE = "--per-app 1 --window 2"


def _wrong(key: str, error: float) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < error


def said_label(ep: int, step: int, truth: str, error: float) -> str:
    """The scripted model's label for a step: the truth, or (on `error` of them) the next label."""
    return LABELS[(LABELS.index(truth) + 1) % 3] if _wrong(f"{ep}:{step}", error) else truth


def said_verdict(ep: int, success: bool, error: float) -> str:
    right = success != _wrong(f"{ep}:verdict", error)
    return "correct" if right else "incorrect"


def truth_responder(episodes: list[EvalEpisode], error: float) -> Callable[[Recorded], Reply]:
    """Answers the judge's request as a model that knows each episode's truth would."""

    def respond(rec: Recorded) -> Reply:
        found = TAG.search(rec.text)
        if found is None:
            return Reply(content="{}")
        k = int(found.group(1))
        ep = episodes[k]
        asked = re.findall(r"^(\d+)\. ", rec.text.split("Steps to judge:")[1].split("The ")[0], re.M)
        steps = []
        for number in map(int, asked):
            label = said_label(k, number, ep.true_steps[number - 1], error)
            steps.append(
                {"step": number, "label": label, "summary": f"step {number}", "analysis": "a"}
                | {c: f"{c} of step {number}" for c in KNOWLEDGE}
                | {"self_reflection": f"{label}: step {number}."}
            )
        reply: dict[str, object] = {"steps": steps}
        if "Then decide whether" in rec.text:
            reply |= {"analysis": "a", "verdict": said_verdict(k, ep.true_success, error)}
        return Reply(content=json.dumps(reply))

    return respond


def measure(episodes: list[EvalEpisode], store: LocalObjectStore, window: int, error: float) -> list[str]:
    """One row of the table: requests, then accuracy and fidelity of steps, knowledge and verdicts."""
    with ScriptedLLM(responder=truth_responder(episodes, error)) as llm:

        async def run() -> list:
            gateway = LLMGateway(LLMSettings(base_url=llm.url, model="critic", concurrency=16))
            judge = LLMEpisodeJudge(gateway, lambda sha: store.get(blob_key(sha)), window=window)
            try:
                return await asyncio.gather(*(judge.judge(ep.query, ep.steps) for ep in episodes))
            finally:
                await gateway.aclose()

        results = asyncio.run(run())
        requests = len(llm.requests)
    steps = right = kept = known = reflected = verdicts = kept_verdicts = 0
    for k, (ep, judged) in enumerate(zip(episodes, results, strict=True)):
        for n, (truth, j) in enumerate(zip(ep.true_steps, judged.steps, strict=True), start=1):
            if ep.steps[n - 1].act is None:
                continue  # unparseable: NEUTRAL without the model's word
            steps += 1
            right += j.label == truth
            kept += j.label == said_label(k, n, truth, error)
            answers = knowledge(j.raw)
            known += answers.get("state_summary") == f"state_summary of step {n}"
            reflected += answers.get("self_reflection", "").split(":")[0] == truth
        verdicts += (judged.verdict.label == "correct") == ep.true_success
        kept_verdicts += judged.verdict.label == said_verdict(k, ep.true_success, error)
    n = len(episodes)
    return [
        str(window),
        str(requests),
        f"{sum(len(ep.steps) for ep in episodes) / requests:.2f}",
        f"{right / steps:.1%}",
        f"{kept / steps:.1%}",
        f"{known / steps:.1%}",
        f"{reflected / steps:.1%}",
        f"{verdicts / n:.1%}",
        f"{kept_verdicts / n:.1%}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-app", type=int, default=5)
    parser.add_argument(
        "--error", type=float, default=0.1, help="share of the scripted model's wrong answers"
    )
    parser.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    apps = [load_app(a) for a in builtin_app_names()]
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalObjectStore(Path(tmp))
        episodes = [ep for ep in build_eval_set(apps, args.per_app, (0.0, 0.3), store=store) if ep.steps]
        episodes = [  # a tag the scripted model finds its episode by
            ep.__class__(**{**ep.__dict__, "query": ep.query.model_copy(
                update={"instruction": f"{ep.query.instruction} [ep-{k}]"})})
            for k, ep in enumerate(episodes)
        ]  # fmt: skip
        rows = [measure(episodes, store, w, args.error) for w in (1, args.window)]
    header = ["window", "requests", "steps/request", "steps right", "as said", "knowledge kept",
              "reflection right", "verdicts right", "as said"]  # fmt: skip
    title = (
        f"episode judge against a scripted truth: {len(episodes)} episodes, the scripted model wrong on "
        f"{args.error:.0%} of its answers (baseline: window 1, a request per step)"
    )
    print(table(title, header, rows))
    points = float(rows[1][3].rstrip("%")) - float(rows[0][3].rstrip("%"))
    print(f"step accuracy, window {args.window} against window 1: {points:+.1f} points")


if __name__ == "__main__":
    main()
