"""The error tree. Every error a user can cause derives from `TrajforgeError`.

The CLI turns a `TrajforgeError` into one line and a non-zero exit; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations


class TrajforgeError(Exception):
    """Root of every error trajforge raises on purpose. Its message is masked when it is made
    (`trajforge.logs.redact`): it is printed, logged and stored as an item's failure detail, and a
    server's error body can quote the request's headers, API key included."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(_masked(a) for a in args))


def _masked(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        from trajforge.logs import redact
    except ImportError:  # the reward library an rl-verl export copies (Python 3.10, no secrets) has none
        return value
    return redact(value)


class ConfigError(TrajforgeError, ValueError):
    """A setting, a config file or a command-line value is wrong."""


class SpecError(TrajforgeError, ValueError):
    """An app spec (navigation DAG) is malformed; `problems` lists every one found."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class StorageError(TrajforgeError):
    """The database or the object store failed or cannot be reached."""


class ObjectNotFound(StorageError, KeyError):
    """An object key does not exist in the object store."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "object not found"


class DatasetError(StorageError):
    """A dataset operation that cannot proceed."""


class VersionConflict(DatasetError):
    """Another publisher claimed the same dataset version first."""


class SealedVersion(DatasetError):
    """An attempt to change a sealed (immutable) dataset version."""


class UnknownVersion(DatasetError, KeyError):
    """No such dataset or version."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LoopBusy(TrajforgeError):
    """Another process runs the loop of this dataset; `holder` names it."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class StageError(TrajforgeError):
    """A stage was asked to run before the stage it reads from; the message names the command."""


class AnnotationError(TrajforgeError):
    """Label Studio is unreachable, refused the token, or answered something unexpected."""


class LLMError(TrajforgeError):
    """A model endpoint failed after retries, or refused the request.

    Attributes:
        status: the last HTTP status the endpoint answered (None: no answer, e.g. a timeout).
        attempts: how many times the request was sent.
    """

    reason = "llm_error"

    def __init__(self, message: str, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts

    def detail(self) -> dict[str, object]:
        """What a per-item failure keeps: the reason, the HTTP status and the message."""
        return {"reason": self.reason, "status": self.status, "error": str(self)}


class LLMRefused(LLMError):
    """The endpoint refused the request itself (a 4xx other than 429): the same request fails again,
    so it is not retried, and a rerun cannot help until the request or the endpoint changes."""

    reason = "llm_refused"


class LLMRateLimited(LLMError):
    """The endpoint kept answering 429 after every retry."""

    reason = "llm_rate_limited"


class LLMTimeout(LLMError):
    """The endpoint kept timing out after every retry."""

    reason = "llm_timeout"


LLM_FAULTS = frozenset(e.reason for e in (LLMError, LLMRefused, LLMRateLimited, LLMTimeout))


class ActionError(TrajforgeError, ValueError):
    """An action could not be parsed from, or formatted into, a model format.

    Attributes:
        reason: short snake_case reason code, counted by the stages that drop items.
        raw: the text that was being parsed ("" when formatting).
    """

    def __init__(self, reason: str, message: str, raw: str = "") -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.raw = raw


class ParseError(ActionError):
    """Model output that is not a valid action in the expected format; keeps the raw text."""


class UnsupportedAction(ActionError):
    """A canonical action that the target format has no way to express."""


class DeviceError(TrajforgeError):
    """The device stopped answering as it should; the device pool recovers from it."""


class DeviceCrashed(DeviceError):
    """The device (or emulator) crashed; it must be reset or replaced."""


class DeviceHung(DeviceError):
    """The device stopped responding within its timeout."""


def yaml_problem(exc: Exception) -> str:
    """A YAML error in one line: `line L, column C: what` (PyYAML's own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{what}" + (f" ({context})" if context else "")
