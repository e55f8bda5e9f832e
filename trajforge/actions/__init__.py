"""The canonical action type and codecs for every published action format."""

from __future__ import annotations

from typing import Protocol

from trajforge.actions.agentcpm import AgentCPMCodec
from trajforge.actions.androidworld import AndroidWorldCodec
from trajforge.actions.computer import ComputerUseCodec, UITarsComputerCodec
from trajforge.actions.model import DEFAULT_SCREEN, Action, ActionKind, Screen, load_json_object
from trajforge.actions.pyautogui import PyAutoGUICodec
from trajforge.actions.qwen import GUIOwlCodec, MobileR1Codec, QwenCodec
from trajforge.actions.uitars import UITarsCodec
from trajforge.errors import ConfigError, ParseError


class ActionCodec(Protocol):
    """Parses one model output into an Action and formats an Action back."""

    name: str
    notes: tuple[str, ...]  # which of thought/intent the format has a slot for

    def parse(self, text: str, screen: Screen) -> Action:
        """Raises ParseError (with the raw text and a reason) on malformed output."""
        ...

    def format(self, action: Action, screen: Screen) -> str:
        """Raises UnsupportedAction when the format cannot express the action."""
        ...

    def represents(self, action: Action) -> bool:
        """True when format() then parse() returns exactly `action` (the conversion is lossless)."""
        ...


class CanonicalCodec:
    """trajforge's own compact JSON of `Action`."""

    name = "canonical"
    notes: tuple[str, ...] = ("thought", "intent")

    def parse(self, text: str, screen: Screen) -> Action:
        from trajforge.actions.model import build_action

        return build_action(text, **load_json_object(text, text))

    def format(self, action: Action, screen: Screen) -> str:
        return action.to_json()

    def represents(self, action: Action) -> bool:
        return True


CODECS: dict[str, ActionCodec] = {
    codec.name: codec
    for codec in (
        AgentCPMCodec(),
        QwenCodec(),
        GUIOwlCodec(),
        UITarsCodec(),
        UITarsCodec("uitars15", absolute=True),
        MobileR1Codec(),
        AndroidWorldCodec(),
        ComputerUseCodec(),
        UITarsComputerCodec(),
        PyAutoGUICodec(),
        CanonicalCodec(),
    )
}


# The formats of a desktop's actions: they refuse a phone's (back, home, swipes, app launches).
DESKTOP_FORMATS = ("computer_use", "uitars15-computer", "pyautogui")
# The devices an app runs on, as a suite or an app spec says (`storage.apps.app_device`); a web page
# fits both kinds of format, a phone only a phone's, a desktop only a desktop's.
DEVICES = ("phone", "web", "desktop")


def misfit(action_format: str, device: str | None) -> str | None:
    """The device kind a format cannot state actions of, when `device` is it (None: it fits)."""
    if action_format == "canonical" or device in (None, "web"):
        return None
    wrong = "phone" if action_format in DESKTOP_FORMATS else "desktop"
    return device if device == wrong else None


def get_codec(name: str) -> ActionCodec:
    """The codec for a format name; ConfigError lists the known names."""
    try:
        return CODECS[name]
    except KeyError:
        raise ConfigError(f"unknown action format {name!r}; known: {', '.join(CODECS)}") from None


__all__ = [
    "CODECS",
    "DEFAULT_SCREEN",
    "DESKTOP_FORMATS",
    "DEVICES",
    "Action",
    "ActionCodec",
    "ActionKind",
    "ParseError",
    "Screen",
    "get_codec",
    "misfit",
]
