"""Policies: what acts on the device. Each speaks a published action format as text."""

from rollout.policies.base import Policy, PolicyOutput
from rollout.policies.oracle import NoisyOracle, OracleNoise, RandomExplorer
from rollout.policies.vlm import VLMPolicy, VLMPolicyConfig

__all__ = [
    "NoisyOracle",
    "OracleNoise",
    "Policy",
    "PolicyOutput",
    "RandomExplorer",
    "VLMPolicy",
    "VLMPolicyConfig",
]
