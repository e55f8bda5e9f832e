"""Logging with secrets redacted: passwords in URLs, bearer tokens, auth headers."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote

# A URL's scheme and its separator, found where a run of scheme characters starts (each run is tried
# once, and possessively: masking stays linear in the text's length). The scheme may be mistyped
# (`postgresql+psycopg//`, `https:/`); `_mask_url_passwords` reads the user and password after it.
_SCHEME = re.compile(r"(?<![a-z0-9+.-])(?P<run>[a-z0-9+.-]*+)(?::/{0,2}|//)", re.I)
_LETTER = re.compile(r"[a-z]", re.I)
_URL_TOKEN = re.compile(r"[^/\s]*")  # what a URL's user and password can hold: no slash, no space
_USER_END = re.compile(r"[:@]")
# libpq and SQLAlchemy also take a password as a query parameter: ...?password=...
_QUERY_PASSWORD = re.compile(r"(?i)([?&](?:password|passwd|pwd|sslpassword)=)[^&#\s]*")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
_AUTH_HEADER = re.compile(
    r"(?i)(['\"]?(?:authorization|api[-_]key|x-api-key|secret[-_]key|access[-_]key)['\"]?\s*[:=]\s*['\"]?)"
    r"(?:(?:bearer|token|basic|digest)\s+)?[^'\",\s}]+"
)


_SECRETS: set[str] = set()  # values the settings hold as secrets, masked wherever they appear
_PLACEHOLDERS = {"EMPTY", "none", "null"}
_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*:?/{0,2}[^:/@\s]*:(?P<pw>.*)@[^@]*$", re.I | re.S)


def remember_secret(value: str | None) -> None:
    """Mask `value` (a password, key or token, and its URL-decoded form) wherever `redact` sees it
    from now on: in a library's error text too, where no pattern would find it."""
    for form in {value, unquote(value)} if value else ():
        if len(form) >= 4 and form not in _PLACEHOLDERS:
            _SECRETS.add(form)


def remember_url_secret(url: str | None) -> None:
    """Remember the password of a URL (`scheme://user:password@host`), written however it is."""
    match = _USERINFO.match(url or "")
    if match:
        remember_secret(match["pw"])


def redact_url(url: str) -> str:
    """A database or service URL with its password replaced by ***, in every form SQLAlchemy takes
    (user:password@, an unencoded @ in it, ?password=), parseable or not."""
    return redact(url)


def redact(text: str) -> str:
    """Mask every password, bearer token and auth header value found in free text, and every
    secret the settings hold (`remember_secret`)."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _mask_url_passwords(text)
    text = _QUERY_PASSWORD.sub(r"\1***", text)
    text = _AUTH_HEADER.sub(r"\1***", text)
    return _BEARER.sub(r"\1***", text)


def _mask_url_passwords(text: str) -> str:
    """`scheme://user:password@host` as `scheme://user:***@host`, in one pass over `text`. The
    password runs to the last @ before the host (one written with an unencoded @ still ends there),
    and the user holds no `:` or `@`. Every scheme in one stretch without a slash or a space shares
    that stretch's end and its last @, found once."""
    out: list[str] = []
    done = token_end = last_at = 0
    for scheme in _SCHEME.finditer(text):
        start = scheme.end()
        if scheme.start() < done or not _LETTER.search(scheme["run"]):
            continue
        if start >= token_end:
            token_end = _URL_TOKEN.match(text, start).end()  # type: ignore[union-attr]  # matches ""
            last_at = text.rfind("@", start, token_end)
        if last_at < start:
            continue
        user_end = _USER_END.search(text, start, last_at + 1)
        if user_end is None or user_end.group() != ":":
            continue
        out += [text[done : user_end.end()], "***@"]
        done = last_at + 1
    return "".join(out) + text[done:]


class RedactingStream:
    """A text stream that writes everything through `redact`: the CLI's stdout and stderr, so no
    printed line (a library's error text included) shows a secret."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, buffer…
        return getattr(self._stream, name)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except (TypeError, ValueError):  # a malformed call: logging reports it when it formats
        return
    cleaned = redact(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with `redact` before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _install_redacting_factory() -> None:
    """Every record, from any library's logger (Prefect, openai, httpx…), is redacted as it is made.

    A filter on a logger only sees that logger's own records, not its children's, so the
    redaction sits in the record factory, where every record passes.
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacting", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_record(record)
        return record

    factory.redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_LOG_FILE: list[Path] = []  # the command's log file, once it has one


def use_log_file(path: Path) -> Path:
    """Make `path` this command's log file (its folder made): the one `error:` line names it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _LOG_FILE[:] = [path]
    return path


def log_file() -> Path | None:
    """The command's log file, where the tracebacks of errors inside a round go (None: the terminal)."""
    return _LOG_FILE[0] if _LOG_FILE else None


class RedactingFileHandler(logging.FileHandler):
    """A log file whose every formatted record is masked, tracebacks included: the exception a
    traceback shows can be a library's, quoting what a server sent back."""

    def __init__(self, filename: str, **kwargs: Any) -> None:
        super().__init__(filename, encoding="utf-8", **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def keep_info(log: Path) -> None:
    """trajforge's own INFO records (a model request's retries) go to `log` as well; the terminal
    keeps the level it had."""
    logger = logging.getLogger("trajforge")
    for handler in logger.handlers:
        if isinstance(handler, _StderrHandler) and handler.level < logger.getEffectiveLevel():
            handler.setLevel(logger.getEffectiveLevel())
    if not any(isinstance(h, RedactingFileHandler) for h in logger.handlers):
        file = RedactingFileHandler(str(log))
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(file)
    logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
    logger.propagate = False  # the root's handler writes the same file: once is enough


class _StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever `sys.stderr` is when a record is emitted, not the one it was made with:
    a command run in-process (a test's runner, a notebook) swaps stderr and closes its own after."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(level: int = logging.INFO) -> None:
    """Redact every log record of the process, and install one stderr handler on `trajforge`.

    Idempotent: every command calls it once (the CLI's callback); calling again only sets the level.
    """
    _install_redacting_factory()
    root = logging.getLogger("trajforge")
    if not any(isinstance(f, RedactingFilter) for h in root.handlers for f in h.filters):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(RedactingFilter())
        root.addHandler(handler)
    root.setLevel(level)


def counts(tally: Mapping[str, int] | Mapping[str, float], empty: str = "none") -> str:
    """`a=1, b=2` in key order, for one-line reports; `empty` when there is nothing."""
    return ", ".join(f"{k}={v}" for k, v in sorted(tally.items())) or empty
