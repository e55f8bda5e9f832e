"""`SimEnv`: the simulated device behind the `Environment` protocol, with screenshots."""

from __future__ import annotations

from collections.abc import Callable

from rollout.sim.render import FrameRenderer
from storage.objectstore import ObjectStore, put_blob
from trajforge.actions import DEFAULT_SCREEN, Action, Screen
from trajforge.appspec import AppSpec
from trajforge.domain import Observation, Query, StepView
from trajforge.world.device import SimDevice
from trajforge.world.model import FaultConfig, Move
from trajforge.world.oracle import actions_for
from trajforge.world.verify import Goal, VerifierResult, verify


class SimEnv:
    """Simulated phone with the given apps; frames go to `store` (content-addressed) if given.

    The observation carries the screenshot hash, the element tree and the screen size,
    nothing of the simulator's hidden state: critics see what they would see on a farm.
    """

    def __init__(
        self,
        apps: list[AppSpec],
        store: ObjectStore | None = None,
        screen: Screen = DEFAULT_SCREEN,
        faults: FaultConfig | None = None,
        renderer: FrameRenderer | None = None,
    ) -> None:
        self.device = SimDevice(apps, screen, faults)
        self.store = store
        self.renderer = renderer or FrameRenderer()
        self.last_frame = b""
        self.frames_written = self.frames_deduped = 0
        self._stored: set[str] = set()
        self._task: Query | None = None

    def reset(self, task: Query) -> Observation:
        self._task = task
        self.device.reset(episode_seed=task.uid)
        return self._observe()

    def step(self, action: Action) -> Observation:
        self.device.act(action)
        return self._observe()

    def close(self) -> None:
        self._task = None

    def snapshot(self) -> object:
        """The device's state, for `restore` (error-recovery probes return here without a replay)."""
        return self.device.snapshot()

    def restore(self, snapshot: object) -> Observation:
        self.device.restore(snapshot)  # type: ignore[arg-type]
        return self._observe()

    def verify(self) -> VerifierResult:
        """The task's verifier on the current state."""
        if self._task is None:
            raise RuntimeError("reset() the environment with a task before verifying")
        return verify(Goal.model_validate(self._task.goal), self.device)

    def _observe(self) -> Observation:
        png, digest = self.renderer.frame(self.device)
        self.last_frame = png
        if self.store is not None and digest not in self._stored:
            _, written = put_blob(self.store, png)
            self.frames_written += written
            self.frames_deduped += not written
            self._stored.add(digest)
        return Observation(
            screenshot=digest,
            width=self.device.size.width,
            height=self.device.size.height,
            elements=[e.to_json() for e in self.device.elements()],
            meta={"backend": "sim"},
        )


def replay_reference(query: Query, apps: list[AppSpec], store: ObjectStore | None) -> list[StepView]:
    """The ground-truth path played on a fault-free simulator, frames stored like a rollout's:
    the demonstration a human would give (GUI-Owl §6.4), for guidance when no rollout succeeded."""
    env = SimEnv(apps, store)
    obs = env.reset(query)
    views = []
    for action in actions_for(env.device, query.app, [Move.from_json(m) for m in query.path]):
        after = env.step(action)
        views.append(StepView.observed(action, obs, after))
        obs = after
    return views


def demonstrator(apps: list[AppSpec], store: ObjectStore | None) -> Callable[[Query], list[StepView] | None]:
    """`replay_reference` on these apps and store, as curation's guidance takes it; None for a query
    of an app that is no spec here (a suite task: there is no simulator to replay it in)."""
    names = {a.name for a in apps}
    return lambda query: replay_reference(query, apps, store) if query.app in names and query.path else None
