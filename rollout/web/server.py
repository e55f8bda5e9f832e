"""App specs served as real HTML pages on 127.0.0.1.

The app's state machine is the simulator's (`SimDevice`); the page is real HTML that the
browser lays out, scrolls and taps. Every tappable element is a link, inputs are forms,
and the page embeds its app state as JSON for the verifier. Nothing here knows about the
browser driving it.
"""

from __future__ import annotations

import html
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

from trajforge.world.device import SimDevice
from trajforge.world.model import Element, fill

CSS = """
*{box-sizing:border-box} body{margin:0;font:18px sans-serif;background:#fff}
.bar{position:sticky;top:0;background:#f3f3f7;padding:16px 16px;font-size:24px;border-bottom:1px solid #ddd}
.bar a{color:#222;text-decoration:none;margin-right:12px}
.el{display:block;margin:8px 16px;padding:20px 16px;border:1px solid #e0e0e0;color:#111;text-decoration:none}
.button{background:#1a73e8;color:#fff;border-radius:10px;border:none}
.toggle .sw{float:right;width:48px;height:26px;border-radius:13px;background:#bbb}
.toggle.on .sw{background:#1a73e8}
.input input{width:100%;font-size:18px;padding:8px;border:2px solid #999;border-radius:8px}
.grid{display:flex;flex-wrap:wrap;padding:40px 8px}
.app_icon{width:42%;text-align:center;border-radius:16px;background:#3c78e8;color:#fff}
.popup{position:fixed;inset:0;background:rgba(0,0,0,.5)}
.popup .box{margin:60% 10%;background:#fff;padding:24px;border-radius:16px}
"""


def _attrs(e: Element) -> str:
    data = {"data-id": e.id, "data-kind": e.kind, "data-widget": e.widget, "data-value": e.value or ""}
    if e.checked is not None:
        data["data-checked"] = "true" if e.checked else "false"
    return " ".join(f'{k}="{html.escape(str(v))}"' for k, v in data.items())


def render_page(device: SimDevice) -> str:
    """The HTML of what the device shows now."""
    s = device.state
    state = {"app": s.app, "screen": s.screen, "slots": device.slot_values(), "finished": s.finished}
    body: list[str] = []
    if s.loading:
        body.append(
            '<div class="bar">Loading…</div>'
            '<p><a class="el" data-id="reload" data-kind="button" href="/loaded">Reload</a></p>'
        )
    elif device.app is None:
        body.append('<div class="grid">')
        for e in device.layout():
            link = f"/tap?id={quote(e.id)}"
            body.append(f'<a class="el app_icon" {_attrs(e)} href="{link}">{html.escape(e.text)}</a>')
        body.append("</div>")
    else:
        title = fill(device.app.screens[s.screen].title, device.slot_values())
        back = '<a href="/press?key=back" data-id="nav_back">←</a>'
        body.append(f'<div class="bar">{back}{html.escape(title)}</div>')
        for e in device.layout():
            body.append(_element(e))
    if s.popup:
        close = (
            '<a class="el button" data-id="popup_close" data-kind="button" '
            'href="/tap?id=popup_close">Close</a>'
        )
        body.append(f'<div class="popup"><div class="box"><p>Allow notifications?</p>{close}</div></div>')
    state_json = json.dumps(state, ensure_ascii=False).replace("</", "<\\/")  # JSON, safe inside <script>
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<style>{CSS}</style></head><body>{''.join(body)}"
        f"<script type='application/json' id='app-state'>{state_json}"
        "</script></body></html>"
    )


def _element(e: Element) -> str:
    text = html.escape(e.text)
    if e.kind == "input":
        return (
            f'<form class="el input" action="/type" method="get" {_attrs(e)}>'
            f'<input type="hidden" name="id" value="{html.escape(e.id)}">'
            f'<input name="text" placeholder="{text}" autocomplete="off"></form>'
        )
    if e.kind == "text":
        return f'<div class="el text" {_attrs(e)}>{text}</div>'
    on = " on" if e.checked else ""
    switch = '<span class="sw"></span>' if e.kind == "toggle" else ""
    mark = (" ●" if e.checked else " ○") if e.kind == "list_item" and e.checked is not None else ""
    return f'<a class="el {e.kind}{on}" {_attrs(e)} href="/tap?id={quote(e.id)}">{text}{mark}{switch}</a>'


class WebAppServer:
    """Serves one device's apps; the device (and so the app state) lives here."""

    def __init__(self, device: SimDevice) -> None:
        self.device = device
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _apply(self, path: str, query: dict[str, list[str]]) -> None:
        arg = {k: v[0] for k, v in query.items()}
        d = self.device
        if path == "/tap":
            d.activate(arg.get("id", ""))
        elif path == "/type":
            d.activate(arg.get("id", ""))
            d.type_text(arg.get("text", ""))
            d.press("enter")
        elif path == "/press":
            d.press(arg.get("key", ""))
        elif path == "/open":
            d.open_app(arg.get("app", ""))
        elif path == "/loaded":
            d.state.loading = False

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parsed = urlparse(self.path)
                if parsed.path != "/":
                    with outer.lock:
                        outer._apply(parsed.path, parse_qs(parsed.query))
                    self.send_response(303)
                    self.send_header("Location", "/")
                    self.end_headers()
                    return
                with outer.lock:
                    page = render_page(outer.device).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(page)

        return Handler
