"""Reach a model endpoint before any work is leased: the configured model must be served there.

`evolve`, `rollout --policy vlm` and `check` probe the endpoint first. The model list answers where
the server has one (vLLM, SGLang); where it does not answer it usefully (`transformers serve`
answers 500 for a local model path), a one-token chat request does. A refused connection, a
refused key, an unknown model or a request the server rejects is one line that names the stage,
the URL (credentials masked) and the fix, instead of a round of `policy_error` episodes; a 5xx or a
429 says it may pass, a 4xx that the same request fails again.
"""

from __future__ import annotations

from typing import Any

import httpx

from trajforge.errors import ConfigError
from trajforge.llm_settings import LLMSettings
from trajforge.logs import redact

PROBE_TIMEOUT_S = 30.0
PROBE_MESSAGES = [{"role": "user", "content": "ping"}]  # the one-token request's whole conversation


def probe_endpoints(llm: LLMSettings) -> list[str]:
    """Probe each stage group's endpoint once (groups that share an endpoint and model share a probe);
    what answered, one line each. ConfigError on the first that cannot be used."""
    shared: dict[tuple[str, str, str], list[str]] = {}
    for group, own in llm.endpoints().items():
        assert own.base_url is not None
        shared.setdefault((own.base_url, own.model, own.api_key.get_secret_value()), []).append(group)
    return [
        probe_endpoint(llm.for_group(groups[0]), "+".join(groups) if len(groups) < 4 else "llm")
        for groups in shared.values()
    ]


def probe_endpoint(llm: LLMSettings, stage: str = "llm") -> str:
    """What answered (one line); ConfigError, one line, when the model cannot be used there."""
    assert llm.base_url is not None, "an offline endpoint has nothing to probe"
    base = llm.base_url.rstrip("/")
    where = f"{stage}: {redact(base)}"
    headers = {"Authorization": f"Bearer {llm.api_key.get_secret_value()}"}
    timeout = min(llm.timeout_s, PROBE_TIMEOUT_S)
    # One connection per request: a server that fails its /models may drop the connection after it.
    with httpx.Client(headers=headers, timeout=timeout) as client:
        try:
            listed: httpx.Response | None = _request(client, "GET", f"{base}/models", where)
        except _Unanswered:  # a server that breaks on its list may still answer a request
            listed = None
    if listed is not None:
        _refuse_key(listed, where)
    served = _served(listed) if listed is not None else None
    if served is not None:
        if llm.model not in served:
            raise ConfigError(
                f"{where} does not serve model {llm.model!r}; it serves: {', '.join(served) or 'none'}; "
                "set llm.model (TRAJFORGE_LLM_MODEL) to one of them"
            )
        return f"{where}: model {llm.model} served (listed by /models)"
    with httpx.Client(headers=headers, timeout=timeout) as client:
        body = {"model": llm.model, "messages": PROBE_MESSAGES, "max_tokens": 1}
        answer = _request(client, "POST", f"{base}/chat/completions", where, body)
    _refuse_key(answer, where)
    if answer.status_code == 404:
        raise ConfigError(
            f"{where} does not serve model {llm.model!r} (404: {_message(answer)}); "
            "set llm.model (TRAJFORGE_LLM_MODEL) to the name the server was started with"
        )
    if answer.status_code == 429 or answer.status_code >= 500:  # the server's trouble, perhaps passing
        raise ConfigError(
            f"{where} failed a one-token request for model {llm.model!r} ({answer.status_code}: "
            f"{_message(answer)}); this can be transient (overloaded, still loading, rate-limited): "
            "check the server's log and rerun when it answers"
        )
    if answer.status_code >= 400:  # the request itself: the same one fails again
        raise ConfigError(
            f"{where} rejected a one-token request for model {llm.model!r} ({answer.status_code}: "
            f"{_message(answer)}); retrying cannot help: fix the server or llm.model"
        )
    return f"{where}: model {llm.model} answered a one-token request"


def _request(client: httpx.Client, method: str, url: str, where: str, body: Any = None) -> httpx.Response:
    try:
        return client.request(method, url, json=body)
    except httpx.ConnectError as exc:
        raise ConfigError(
            f"{where}: nothing answers there ({exc}); start the model server or fix llm.base_url "
            "(TRAJFORGE_LLM_BASE_URL)"
        ) from None
    except httpx.TimeoutException:
        raise ConfigError(
            f"{where}: no answer in {client.timeout.read}s; check the server is up and not overloaded"
        ) from None
    except httpx.HTTPError as exc:
        raise _Unanswered(f"{where}: {type(exc).__name__}: {redact(str(exc))}; fix llm.base_url") from None


class _Unanswered(ConfigError):
    """The server took the connection but gave no HTTP answer (reset, broken response)."""


def _refuse_key(response: httpx.Response, where: str) -> None:
    if response.status_code in (401, 403):
        raise ConfigError(
            f"{where} refused the API key ({response.status_code}: {_message(response)}); set llm.api_key "
            "(TRAJFORGE_LLM_API_KEY) to a key that server accepts"
        )


def _served(response: httpx.Response) -> list[str] | None:
    """The model ids an OpenAI-style /models answer lists; None when it is no such answer."""
    if response.status_code != 200:
        return None
    try:
        data = response.json().get("data")
        return [str(m["id"]) for m in data] if isinstance(data, list) else None
    except (ValueError, AttributeError, KeyError, TypeError):
        return None


def _message(response: httpx.Response) -> str:
    """The server's own error message, on one line, cut."""
    try:
        body = response.json()  # OpenAI's {"error": {"message"}}, FastAPI's {"detail"}
        error = body.get("error") or body.get("detail") or body if isinstance(body, dict) else body
        text = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        text = response.text
    return redact(" ".join(str(text).split()))[:200]
