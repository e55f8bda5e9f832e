"""Errors a device can raise mid-episode; the device pool (a later issue) recovers from them."""

from __future__ import annotations

from trajforge.errors import TrajforgeError


class DeviceError(TrajforgeError):
    """The device stopped answering as it should."""


class DeviceCrashed(DeviceError):
    """The device (or emulator) crashed; it must be reset or replaced."""


class DeviceHung(DeviceError):
    """The device stopped responding within its timeout."""
