"""Step labels from the learned trajectory critic: the change of its value along the episode.

The value after step i is the critic's success probability for the episode cut after that step
(`CriticView.prefix`). A step that raises it by more than `MARGIN` is GOOD, one that lowers it by
more is HARMFUL, the rest NEUTRAL (GUI-Owl §6.3's labels). Ending the episode is judged by the
whole episode's verdict: a success claim the critic believes is GOOD, one it does not is HARMFUL.
The model is the one that judged the episode, fitted without its query, so the labels are out of
sample too. They serve where the spec's route check has no map (a suite's task, an app without
a spec), and a model step critic's labels win over both.
"""

from __future__ import annotations

import numpy as np

from critics.episode_features import features
from critics.learned import SUCCESS_AT, Checkpoint
from critics.view import CriticView
from trajforge.domain import StepVerdict

NAME, VERSION = "learned_step", "3"
MARGIN = 0.05


def step_verdicts(model: Checkpoint | None, view: CriticView, app: str | None = None) -> list[StepVerdict]:
    if model is None:
        why = "The learned critic has too few anchored episodes of other queries to judge steps."
        return [StepVerdict("NEUTRAL", "untrained", why) for _ in view.steps]
    values = model.prob(np.array([features(view.prefix(n)) for n in range(len(view.steps) + 1)]), app)
    out = []
    for i, st in enumerate(view.steps):
        action = st.action or {}
        change = float(values[i + 1] - values[i])
        if st.action is None:
            out.append(
                StepVerdict("NEUTRAL", "unparseable_output", "The output did not parse; nothing happened.")
            )
        elif action.get("kind") == "terminate":
            believed = values[-1] >= SUCCESS_AT
            claims = action.get("status") == "success"
            good = believed == claims
            reason = (
                ("completes_task" if claims else "gives_up_rightly")
                if good
                else ("premature_stop" if claims else "gives_up")
            )
            out.append(StepVerdict("GOOD" if good else "HARMFUL", reason, f"Ends the episode ({reason})."))
        elif change > MARGIN:
            out.append(
                StepVerdict("GOOD", "raises_value", f"Success looks likelier after it (+{change:.2f}).")
            )
        elif change < -MARGIN:
            out.append(
                StepVerdict("HARMFUL", "lowers_value", f"Success looks less likely after it ({change:.2f}).")
            )
        else:
            out.append(StepVerdict("NEUTRAL", "keeps_value", "Changes little toward the task."))
    return out
