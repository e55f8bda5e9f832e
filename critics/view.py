"""What a critic may see of an episode, and nothing else (Step-GUI §2.1.4, GUI-Owl §6.3).

A critic judges from what a model critic on a real farm would be shown: the instruction, the
screenshots (by hash), the element tree as the device reports it (visible text, role,
bounds, checked / selected / focused), and the actions with the policy's raw output. Each step
is the kernel's one view of a step (`trajforge.domain.StepView`) whose elements keep only the
fields a device reports (`SeenElement`): no spec widget id, slot or value, no query path or
goal, no hidden device state and no anchor, so a critic cannot read what the view does not carry
(`tests/critics/test_learned.py` fails if such a field appears).

Hit-testing is what a real device does (`StepView.touched`): the innermost element under the
point takes the tap, and a tap just outside every box goes to the nearest element within the
touch slop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trajforge.domain import StepView
from trajforge.episode import Step


@dataclass(frozen=True)
class CriticView:
    """An episode as a critic sees it."""

    instruction: str
    steps: tuple[StepView, ...]

    def prefix(self, n: int) -> CriticView:
        return CriticView(self.instruction, self.steps[:n])


def critic_view(instruction: str, steps: Sequence[Step]) -> CriticView:
    """Recorded steps as a critic sees them: each step's view, its tree as the device reports it."""
    return CriticView(instruction, tuple(st.view().as_reported() for st in steps))
