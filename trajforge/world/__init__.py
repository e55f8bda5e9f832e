"""The world model: app specs as state machines, their moves, verifiers and the oracle.

Every stage that reasons about an app's navigation DAG imports it from here: query
generation samples and replays paths, the critics read element trees, the simulated farm
(`rollout.sim`) renders it. It draws nothing and touches no store.
"""

from trajforge.world.device import SimDevice
from trajforge.world.model import Element, FaultConfig, Move
from trajforge.world.verify import Goal, VerifierResult, verify

__all__ = ["Element", "FaultConfig", "Goal", "Move", "SimDevice", "VerifierResult", "verify"]
