"""A small OpenAI-compatible chat-completions server that answers from a script.

Tests and benchmarks point the gateway at it. It can inject latency, 429s, 5xx,
timeouts (a delay longer than the client's timeout), malformed JSON content, a body
that is not JSON at all (a proxy's error page) and a completion with no choices,
validates image data URLs like a real server would, and records every request.

The endpoint probe (`trajforge.probe`) is answered apart, like a server that is up: `GET /models`
lists `models` (404 when None, a server without the list), and its one-token "ping" gets `probe`,
neither recorded nor taken from the script, so tests that count requests count the work only.

    with ScriptedLLM() as llm:
        llm.enqueue(Reply(status=429), Reply(content='{"label": "GOOD"}'))
        llm.on("summarise", Reply(content="done"))
        ... LLMSettings(base_url=llm.url) ...
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trajforge.probe import PROBE_MESSAGES


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 resets bursts of concurrent connects


@dataclass
class Reply:
    content: str = "ok"
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int = 10
    completion_tokens: int = 5
    body: str | None = None  # sent as it is with status 200 instead of a completion
    no_choices: bool = False  # a completion whose `choices` is empty
    quote_headers: bool = False  # an error whose message quotes the request's headers (its API key)


@dataclass
class Recorded:
    body: dict[str, Any]
    images: int
    text: str  # all text parts joined, for matching


class ScriptedLLM:
    """Answers, in order of precedence: queued replies, substring rules, the responder, `default`."""

    def __init__(
        self,
        default: Reply | None = None,
        latency_s: float = 0.0,
        responder: Callable[[Recorded], Reply | None] | None = None,
        models: list[str] | None = None,
        probe: Reply | None = None,
    ) -> None:
        self.default = default or Reply()
        self.models, self.probe = models, probe or Reply()
        self.latency_s = latency_s
        self.responder = responder
        self.queue: deque[Reply] = deque()
        self.rules: list[tuple[str, Reply]] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.queue.extend(replies)

    def on(self, substring: str, reply: Reply) -> None:
        self.rules.append((substring, reply))

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _pick(self, rec: Recorded) -> Reply:
        with self._lock:
            self.requests.append(rec)
            if self.queue:
                return self.queue.popleft()
        for substring, reply in self.rules:
            if substring in rec.text:
                return reply
        if self.responder is not None:
            picked = self.responder(rec)
            if picked is not None:
                return picked
        return self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if not self.path.endswith("/models") or outer.models is None:
                    return self._send(404, _error(f"no route {self.path}"), {})
                self._send(200, {"object": "list", "data": [{"id": m} for m in outer.models]}, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length))
                except json.JSONDecodeError:
                    return self._send(400, _error("invalid JSON body"), {})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, _error(f"no route {self.path}"), {})
                try:
                    rec = _record(body)
                except ValueError as exc:
                    return self._send(400, _error(str(exc)), {})
                probing = body.get("max_tokens") == 1 and body.get("messages") == PROBE_MESSAGES
                reply = outer.probe if probing else outer._pick(rec)
                time.sleep(outer.latency_s + reply.delay_s)
                if reply.status != 200:
                    quoted = f"; request headers: {dict(self.headers)}" if reply.quote_headers else ""
                    return self._send(reply.status, _error(f"scripted {reply.status}{quoted}"), reply.headers)
                if reply.body is not None:
                    return self._send_raw(reply.body.encode())
                self._send(200, _completion(body.get("model", "scripted"), reply), reply.headers)

            def _send_raw(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "scripted", "code": None}}


def _record(body: dict[str, Any]) -> Recorded:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    images, texts = 0, []
    for msg in messages:
        content = msg.get("content")
        parts: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        )
        for part in parts:
            if part.get("type") == "text":
                texts.append(part["text"])
            elif part.get("type") == "image_url":
                url = part["image_url"]["url"]
                head, _, data = url.partition(",")
                if not head.startswith("data:image/") or not head.endswith(";base64"):
                    raise ValueError(f"image_url is not a base64 data URL: {url[:40]!r}")
                try:
                    base64.b64decode(data, validate=True)
                except binascii.Error as exc:
                    raise ValueError(f"image data URL is not valid base64: {exc}") from exc
                images += 1
    return Recorded(body=body, images=images, text="\n".join(texts))


def _completion(model: str, reply: Reply) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": []
        if reply.no_choices
        else [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": reply.content},
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def querygen_responder(mode: dict[str, str]) -> Callable[[Recorded], Reply]:
    """Answers query synthesis and refinement like a model that follows the prompts.

    `mode`: {"synth": "malformed"} truncates the synthesis JSON; {"refine": "lossy"} drops the values.
    """

    def respond(rec: Recorded) -> Reply:
        text = rec.text
        if 'Answer with JSON only:\n{"instruction"' in text:
            if mode.get("synth") == "malformed":
                return Reply(content='{"instruction": "Open the app and')
            steps = re.findall(r"^- (.+)$", text.split("Values the task fixes")[0], re.M)
            return Reply(content=json.dumps({"instruction": "Open it, then " + ", then ".join(steps)}))
        values = text.split("Values to keep: ")[1].split("\n")[0].split(", ")
        if mode.get("refine") == "lossy":
            return Reply(content=json.dumps({"query": "Do the usual"}))
        return Reply(content=json.dumps({"query": "Please: " + "; ".join(values)}))

    return respond


def main() -> None:
    """Serve a fixed reply from its own process: `python -m tests.support.scripted_llm`."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--content", default='{"label": "GOOD"}')
    args = parser.parse_args()
    with ScriptedLLM(default=Reply(content=args.content), latency_s=args.latency_ms / 1000) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin


if __name__ == "__main__":
    main()
