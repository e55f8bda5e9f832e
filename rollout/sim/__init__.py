"""The simulated emulator: app specs interpreted as state machines and rendered with Pillow."""

from rollout.sim.device import Element, FaultConfig, Move, SimDevice
from rollout.sim.verify import Goal, VerifierResult, verify

__all__ = ["Element", "FaultConfig", "Goal", "Move", "SimDevice", "VerifierResult", "verify"]
