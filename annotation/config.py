"""The Label Studio labelling config: one trajectory per task.

A task's data is `{"instruction", "critics", "steps": [{"image", "text"}], "trajforge": {...}}`.
The annotator sets the trajectory verdict, a label per step and, optionally, a corrected
action or thought per step (Mobile-R1's corrections). The names below are the contract
between `push` (which writes predictions with them) and `pull` (which reads results).
"""

from __future__ import annotations

import hashlib

VERDICT = "verdict"
VERDICTS = ("success", "failure", "unsure")
STEP_LABELS = ("GOOD", "NEUTRAL", "HARMFUL")
INSTRUCTION = "instruction"


def screen(i: int) -> str:
    return f"screen_{i}"


def step_label(i: int) -> str:
    return f"step_label_{i}"


def corrected_action(i: int) -> str:
    return f"corrected_action_{i}"


def corrected_thought(i: int) -> str:
    return f"corrected_thought_{i}"


_EXAMPLE = "{&quot;kind&quot;:&quot;tap&quot;,&quot;point&quot;:[500,300]}"


def choice(from_name: str, to_name: str, value: str) -> dict[str, object]:
    """One `choices` result item, as predictions carry it and annotations return it."""
    return {"from_name": from_name, "to_name": to_name, "type": "choices", "value": {"choices": [value]}}


def _choices(values: tuple[str, ...]) -> str:
    return "".join(f'<Choice value="{v}"/>' for v in values)


# The Repeater expands `{{idx}}` once per step, so names line up with screen(i) and friends.
LABEL_CONFIG = f"""<View>
  <Header value="Task"/>
  <Text name="{INSTRUCTION}" value="$instruction"/>
  <Text name="critics" value="$critics"/>
  <Header value="Did the agent complete the task?"/>
  <Choices name="{VERDICT}" toName="{INSTRUCTION}" choice="single-radio" showInline="true" required="true">
    {_choices(VERDICTS)}
  </Choices>
  <Repeater on="$steps" indexFlag="{{{{idx}}}}">
    <View style="border-top: 1px solid #ddd; margin-top: 12px; padding-top: 8px">
      <Text name="step_{{{{idx}}}}" value="$steps[{{{{idx}}}}].text"/>
      <Image name="screen_{{{{idx}}}}" value="$steps[{{{{idx}}}}].image" maxWidth="360px"/>
      <Choices name="step_label_{{{{idx}}}}" toName="screen_{{{{idx}}}}" choice="single-radio"
               showInline="true">
        {_choices(STEP_LABELS)}
      </Choices>
      <TextArea name="corrected_action_{{{{idx}}}}" toName="screen_{{{{idx}}}}" maxSubmissions="1"
                editable="true" placeholder="corrected action, e.g. {_EXAMPLE}"/>
      <TextArea name="corrected_thought_{{{{idx}}}}" toName="screen_{{{{idx}}}}" maxSubmissions="1"
                editable="true" placeholder="corrected thought"/>
    </View>
  </Repeater>
</View>
"""

CONFIG_SHA256 = hashlib.sha256(LABEL_CONFIG.encode()).hexdigest()
