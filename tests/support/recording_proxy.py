"""A pass-through HTTP proxy that keeps every chat request a client sends: the live requests a model
server was actually given, for a test to compare with what the model was trained on."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

FORWARDED = ("content-type", "authorization", "accept")


@contextmanager
def recording_proxy(upstream: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve on 127.0.0.1, forwarding each request to `upstream` (an OpenAI base URL, .../v1) and its
    answer back unchanged. Yields the proxy's base URL and the JSON bodies of the chat requests so far."""
    target = urlsplit(upstream)
    root = f"{target.scheme}://{target.netloc}"
    sent: list[dict[str, Any]] = []

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if body and self.path.endswith("/chat/completions"):
                sent.append(json.loads(body))
            headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}
            request = urllib.request.Request(
                root + self.path, data=body, method=self.command, headers=headers
            )
            try:
                with urllib.request.urlopen(request, timeout=600) as answer:
                    status, data, kind = answer.status, answer.read(), answer.headers.get("Content-Type")
            except urllib.error.HTTPError as exc:
                status, data, kind = exc.code, exc.read(), exc.headers.get("Content-Type")
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{target.path}", sent
    finally:
        server.shutdown()
        server.server_close()
