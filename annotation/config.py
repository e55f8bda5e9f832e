"""The Label Studio labelling config: one trajectory per task, one step per page.

A task's data is `{"instruction", "critics", "filmstrip", "steps": [{"image", "after", "text"}],
"app", "reasons", "n_steps", "verdicts", "trajforge": {...}}`. The view shows the task, a
filmstrip of every step (thumbnail, action and target under each; a click opens the screen
full size), the trajectory verdict and the first wrong step; then one page per step with the
screen before the action (the action drawn on it) beside the screen after it, a step label,
and Mobile-R1's three corrections: a state-grounded thought, a clear low-level instruction,
and the exact action, typed or clicked on the screen. The names below are the contract
between `push` (which writes predictions with them) and `pull` (which reads results).
"""

from __future__ import annotations

import hashlib

VERDICT = "verdict"
VERDICTS = ("success", "failure", "unsure")
VERDICT_KEYS = {"success": "s", "failure": "f", "unsure": "u"}
STEP_LABELS = ("GOOD", "NEUTRAL", "HARMFUL")
INSTRUCTION = "instruction"
FIRST_WRONG = "first_wrong_step"
# Click-to-correct: a keypoint on the before-screen, labelled with the action it stands for.
# A key shared by every step's page must not select anything by itself (a choice hotkey would
# set that choice on every step at once); a keypoint label only arms the next click.
POINT_KINDS = ("click", "long_press", "swipe_start", "swipe_end")
POINT_KEYS = {"click": "c", "long_press": "l", "swipe_start": "w", "swipe_end": "e"}
NEXT_STEP, PREVIOUS_STEP = "alt+right", "alt+left"  # Label Studio's repeater paging keys


def screen(i: int) -> str:
    return f"screen_{i}"


def after(i: int) -> str:
    return f"after_{i}"


def step_label(i: int) -> str:
    return f"step_label_{i}"


def corrected_action(i: int) -> str:
    return f"corrected_action_{i}"


def corrected_thought(i: int) -> str:
    return f"corrected_thought_{i}"


def corrected_instruction(i: int) -> str:
    return f"corrected_instruction_{i}"


def correct_point(i: int) -> str:
    return f"correct_point_{i}"


# A placeholder that parses: the canonical JSON form, coordinates per mille of the screen.
EXAMPLE_ACTION = '{"kind":"click","point":[500,300]}'
COORDINATES = "x and y in per mille (0-1000) of the screen's width and height, origin top left"


def choice(from_name: str, to_name: str, value: str) -> dict[str, object]:
    """One `choices` result item, as predictions carry it and annotations return it."""
    return {"from_name": from_name, "to_name": to_name, "type": "choices", "value": {"choices": [value]}}


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


_ACTION_PLACEHOLDER = _attr(f"exact action, e.g. {EXAMPLE_ACTION} ({COORDINATES}); or click the screen")
# The Repeater expands `{{idx}}` once per step, so names line up with screen(i) and friends;
# pagination shows one step at a time (alt+left / alt+right).
_IDX = "{{idx}}"
LABEL_CONFIG = f"""<View>
  <Style>
    .tf-strip {{ display: flex; gap: 6px; overflow-x: auto; padding-bottom: 4px; }}
    .tf-strip figure {{ margin: 0; width: 96px; flex: none; font-size: 11px; line-height: 1.25; }}
    .tf-strip img {{ width: 96px; border: 1px solid #ccc; }}
    .tf-strip figcaption b {{ color: #b00; }}
  </Style>
  <Header value="Task" size="5"/>
  <Text name="{INSTRUCTION}" value="$instruction"/>
  <Text name="critics" value="$critics"/>
  <HyperText name="filmstrip" value="$filmstrip" inline="true"/>
  <View style="display: flex; gap: 24px; align-items: center">
    <View>
      <Header value="Did the agent complete the task? (keys s / f / u)" size="5"/>
      <Choices name="{VERDICT}" toName="{INSTRUCTION}" choice="single-radio" showInline="true"
               required="true">
        {"".join(f'<Choice value="{v}" hotkey="{VERDICT_KEYS[v]}"/>' for v in VERDICTS)}
      </Choices>
    </View>
    <View>
      <Header value="First wrong step (0: none was wrong)" size="5"/>
      <Number name="{FIRST_WRONG}" toName="{INSTRUCTION}" min="0" step="1"/>
    </View>
  </View>
  <Repeater on="$steps" indexFlag="{_IDX}" mode="pagination">
    <View style="border-top: 1px solid #ddd; padding-top: 6px">
      <Text name="step_{_IDX}" value="$steps[{_IDX}].text"/>
      <View style="display: flex; gap: 12px; align-items: flex-start">
        <View style="width: 48%">
          <Header value="before: the action in red; click here to correct it" size="6"/>
          <Image name="screen_{_IDX}" value="$steps[{_IDX}].image" maxWidth="100%" maxHeight="440px"
                 zoomControl="true"/>
          <KeyPointLabels name="correct_point_{_IDX}" toName="screen_{_IDX}" strokeWidth="3" smart="false">
            {"".join(f'<Label value="{k}" hotkey="{POINT_KEYS[k]}"/>' for k in POINT_KINDS)}
          </KeyPointLabels>
        </View>
        <View style="width: 48%">
          <Header value="after" size="6"/>
          <Image name="after_{_IDX}" value="$steps[{_IDX}].after" maxWidth="100%" maxHeight="440px"/>
        </View>
      </View>
      <Choices name="step_label_{_IDX}" toName="screen_{_IDX}" choice="single-radio" showInline="true">
        {"".join(f'<Choice value="{v}"/>' for v in STEP_LABELS)}
      </Choices>
      <TextArea name="corrected_thought_{_IDX}" toName="screen_{_IDX}" maxSubmissions="1" editable="true"
                placeholder="corrected thought: what the screen shows and what to do next"/>
      <TextArea name="corrected_instruction_{_IDX}" toName="screen_{_IDX}" maxSubmissions="1" editable="true"
                placeholder="clear low-level instruction, e.g. Tap the search box at the top"/>
      <TextArea name="corrected_action_{_IDX}" toName="screen_{_IDX}" maxSubmissions="1" editable="true"
                placeholder="{_ACTION_PLACEHOLDER}"/>
    </View>
  </Repeater>
</View>
"""

INSTRUCTIONS = f"""<h3>Judging a trajectory</h3>
<ul>
<li><b>Verdict.</b> <i>success</i> when the screen after the last action shows the task done, whether or
not the agent then said it was finished (the programmatic verifiers judge the final state too);
<i>failure</i> otherwise, including a wrong answer or a task done only half; <i>unsure</i> when the
screens do not show it. Keys: s, f, u.</li>
<li><b>First wrong step.</b> The number of the first step that did not move toward the goal; 0 when none.</li>
<li><b>Step labels.</b> GOOD moved toward the goal, NEUTRAL changed nothing that matters, HARMFUL moved away
or undid progress. Label the steps you checked; a step you leave unlabelled is not counted.</li>
<li><b>Corrections</b> (on a wrong step): the thought the agent should have had, a clear instruction
(\u201cTap the search box at the top\u201d), and the exact action: either click the before-screen with
the kind selected (c click, l long press, w swipe start, e swipe end) or type it as JSON, e.g.
<code>{EXAMPLE_ACTION}</code>, {COORDINATES}.</li>
</ul>
<p>Steps: {NEXT_STEP} next, {PREVIOUS_STEP} previous. Audit tasks are blind: the critics' verdicts are hidden
so your judgement is independent.</p>
"""

# A project is brought up to date when either changes.
CONFIG_SHA256 = hashlib.sha256((LABEL_CONFIG + INSTRUCTIONS).encode()).hexdigest()
