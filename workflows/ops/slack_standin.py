"""A stand-in for the parts of Slack the console uses, as a local process
(`manage.py slack_standin`): tests and the bench point SLACK_API_URL at
`http://HOST:PORT/api/` (docs/guides/slack-admins.md#the-stand-in).

It speaks Slack's request and response shapes, as slack_sdk sends and reads
them:

- `POST /api/chat.postMessage`, `/api/chat.update`, `/api/chat.postEphemeral`
  with a JSON or form-encoded body and `Authorization: Bearer <token>` (or a
  `token` field); a wrong token → `{"ok": false, "error": "invalid_auth"}`,
  an unknown channel → `channel_not_found`, an update of an unknown `ts` →
  `message_not_found`, more than 50 blocks or a block over Slack's text
  limits → `invalid_blocks`;
- `POST /actions/<anything>`: a `response_url`; the JSON body is recorded
  and the answer is `ok`, as Slack's hooks answer;
- `POST /_standin/rate_limit {"calls": N, "retry_after": S}`: the next N API
  calls answer 429 with `Retry-After: S` and `{"ok": false, "error":
  "ratelimited"}`;
- `GET /_standin/calls`: every call received, in order (`method`, `path`,
  `body` parsed, `status` answered, `at`); `DELETE` clears them;
- `GET /_standin/channel/<id>`: the channel's current messages, rendered
  as plain escaped HTML (for the reviewers' guide's pictures).

It imports nothing of the project: it stands for another company's service.
"""

from __future__ import annotations

import html
import itertools
import json
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MAX_BODY_BYTES = 1024 * 1024
# Slack's own limits (api.slack.com/reference/block-kit/blocks).
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ACTION_ELEMENTS = 25
METHODS = ("chat.postMessage", "chat.update", "chat.postEphemeral")
BOT_ID = "B0STANDIN"
BOT_USER = "U0STANDIN"


class SlackError(Exception):
    def __init__(self, error: str, *, errors: list[str] | None = None):
        super().__init__(error)
        self.error = error
        self.errors = errors or []


def block_errors(blocks) -> list[str]:
    """Why Slack would answer invalid_blocks to these blocks (empty: valid)."""
    if not isinstance(blocks, list):
        return ["blocks must be a list"]
    problems = []
    if len(blocks) > MAX_BLOCKS:
        problems.append(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    for index, block in enumerate(blocks):
        where = f"[json-pointer:/blocks/{index}"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            problems.append(f"missing required field: type {where}]")
            continue
        text = (block.get("text") or {}).get("text", "") if isinstance(block.get("text"), dict) else ""
        if block["type"] == "section":
            if len(text) > MAX_SECTION_TEXT:
                problems.append(f"must be less than {MAX_SECTION_TEXT + 1} characters {where}/text/text]")
            for number, field in enumerate(block.get("fields") or []):
                if len(field.get("text", "")) > MAX_FIELD_TEXT:
                    problems.append(f"must be less than {MAX_FIELD_TEXT + 1} characters {where}/fields/{number}/text]")
        elif block["type"] == "header" and len(text) > MAX_HEADER_TEXT:
            problems.append(f"must be less than {MAX_HEADER_TEXT + 1} characters {where}/text/text]")
        elif block["type"] == "actions":
            elements = block.get("elements") or []
            if len(elements) > MAX_ACTION_ELEMENTS:
                problems.append(f"no more than {MAX_ACTION_ELEMENTS} items allowed {where}/elements]")
            for number, element in enumerate(elements):
                if len((element.get("text") or {}).get("text", "")) > MAX_BUTTON_TEXT:
                    problems.append(f"must be less than {MAX_BUTTON_TEXT + 1} characters {where}/elements/{number}]")
                if len(element.get("value", "")) > MAX_BUTTON_VALUE:
                    problems.append(
                        f"must be less than {MAX_BUTTON_VALUE + 1} characters {where}/elements/{number}/value]"
                    )
    return problems


class Workspace:
    """The channels, their messages, the calls received and the rate limit
    to come; one lock, the requests are few."""

    def __init__(self, token: str, channels: list[str]):
        self.token = token
        self.channels: dict[str, dict[str, dict]] = {channel: {} for channel in channels}
        self.calls: list[dict] = []
        self.limited_calls = 0
        self.retry_after = 1
        self._ts = itertools.count(1)
        self._lock = threading.Lock()

    def record(self, method: str, path: str, body, status: int) -> None:
        with self._lock:
            self.calls.append({"method": method, "path": path, "body": body, "status": status, "at": time.time()})

    def take_rate_limit(self) -> int | None:
        """Retry-After seconds when this call is one of the limited ones."""
        with self._lock:
            if self.limited_calls <= 0:
                return None
            self.limited_calls -= 1
            return self.retry_after

    def call(self, method: str, body: dict, token: str | None) -> dict:
        if token != self.token:
            raise SlackError("invalid_auth")
        channel = body.get("channel")
        if not isinstance(channel, str) or channel not in self.channels:
            raise SlackError("channel_not_found")
        blocks = body.get("blocks")
        if blocks is not None:
            problems = block_errors(blocks)
            if problems:
                raise SlackError("invalid_blocks", errors=problems)
        if not body.get("text") and not blocks:
            raise SlackError("no_text")
        with self._lock:
            messages = self.channels[channel]
            if method == "chat.postEphemeral":
                return {"ok": True, "message_ts": self._new_ts()}
            if method == "chat.update":
                ts = body.get("ts")
                if ts not in messages:
                    raise SlackError("message_not_found")
                message = {**messages[ts], "text": body.get("text", ""), "blocks": blocks or []}
                message["edited"] = {"user": BOT_USER, "ts": self._new_ts()}
                messages[ts] = message
                return {"ok": True, "channel": channel, "ts": ts, "text": message["text"], "message": message}
            ts = self._new_ts()
            message = {
                "type": "message",
                "subtype": "bot_message",
                "text": body.get("text", ""),
                "blocks": blocks or [],
                "bot_id": BOT_ID,
                "user": BOT_USER,
                "ts": ts,
            }
            messages[ts] = message
            return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def messages(self, channel: str) -> list[dict] | None:
        with self._lock:
            if channel not in self.channels:
                return None
            return [dict(message) for message in self.channels[channel].values()]


def _parse_body(content_type: str, raw: bytes):
    """A JSON body, or a form's fields (the JSON-valued ones, `blocks`, decoded)."""
    if content_type.startswith("application/json"):
        return json.loads(raw or b"{}")
    fields = {key: values[-1] for key, values in parse_qs(raw.decode(), keep_blank_values=True).items()}
    for key in ("blocks", "attachments"):
        if key in fields:
            try:
                fields[key] = json.loads(fields[key])
            except ValueError:
                pass
    return fields


def render_channel(channel: str, messages: list[dict]) -> str:
    """The channel's messages as simple HTML: every text escaped, buttons as
    inert buttons."""
    parts = [
        "<!doctype html><meta charset=utf-8><title>#",
        html.escape(channel),
        "</title><style>body{font:15px sans-serif;max-width:46em;margin:1em auto}"
        ".msg{border:1px solid #ccc;border-radius:6px;padding:.5em 1em;margin:1em 0}"
        ".ctx{color:#666;font-size:13px}pre{white-space:pre-wrap}button{margin-right:.5em}</style>",
        f"<h1>#{html.escape(channel)}</h1>",
    ]
    for message in messages:
        parts.append('<div class="msg">')
        for block in message.get("blocks") or [{"type": "section", "text": {"text": message.get("text", "")}}]:
            kind = block.get("type")
            text = html.escape((block.get("text") or {}).get("text", ""))
            if kind == "header":
                parts.append(f"<h2>{text}</h2>")
            elif kind == "section":
                parts.append(f"<pre>{text}</pre>")
                parts.extend(f"<pre>{html.escape(f.get('text', ''))}</pre>" for f in block.get("fields") or [])
            elif kind == "context":
                items = " · ".join(html.escape(e.get("text", "")) for e in block.get("elements") or [])
                parts.append(f'<p class="ctx">{items}</p>')
            elif kind == "divider":
                parts.append("<hr>")
            elif kind == "actions":
                buttons = "".join(
                    f"<button>{html.escape((e.get('text') or {}).get('text', ''))}</button>"
                    for e in block.get("elements") or []
                )
                parts.append(f"<p>{buttons}</p>")
        parts.append("</div>")
    return "".join(parts)


class Handler(BaseHTTPRequestHandler):
    server: StandinServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def _answer(self, status: int, payload, *, headers: dict | None = None, content_type="application/json") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ValueError("body too large")
        return _parse_body(self.headers.get("Content-Type", ""), self.rfile.read(length))

    def do_GET(self):
        path = urlsplit(self.path).path
        workspace = self.server.workspace
        if path == "/_standin/calls":
            with workspace._lock:
                calls = list(workspace.calls)
            return self._answer(200, calls)
        if path.startswith("/_standin/channel/"):
            channel = path.rsplit("/", 1)[1]
            messages = workspace.messages(channel)
            if messages is None:
                return self._answer(404, {"ok": False, "error": "channel_not_found"})
            page = render_channel(channel, messages).encode()
            return self._answer(200, page, content_type="text/html; charset=utf-8")
        if path == "/_standin/ready":
            return self._answer(200, {"ok": True})
        self._answer(404, {"ok": False, "error": "unknown_method"})

    def do_DELETE(self):
        if urlsplit(self.path).path != "/_standin/calls":
            return self._answer(404, {"ok": False, "error": "unknown_method"})
        with self.server.workspace._lock:
            self.server.workspace.calls.clear()
        self._answer(200, {"ok": True})

    def do_POST(self):
        path = urlsplit(self.path).path
        workspace = self.server.workspace
        try:
            body = self._body()
        except ValueError:
            return self._answer(400, {"ok": False, "error": "invalid_json"})
        if path == "/_standin/rate_limit":
            with workspace._lock:
                workspace.limited_calls = int(body.get("calls", 1))
                workspace.retry_after = int(body.get("retry_after", 1))
            return self._answer(200, {"ok": True})
        if path.startswith("/actions/"):
            workspace.record("response_url", path, body, 200)
            return self._answer(200, b"ok", content_type="text/html")
        method = path.removeprefix("/api/")
        if not path.startswith("/api/") or method not in METHODS:
            return self._answer(404, {"ok": False, "error": "unknown_method"})
        retry_after = workspace.take_rate_limit()
        if retry_after is not None:
            workspace.record(method, path, body, 429)
            return self._answer(429, {"ok": False, "error": "ratelimited"}, headers={"Retry-After": str(retry_after)})
        authorization = self.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else body.get("token")
        try:
            answer = workspace.call(method, body, token)
        except SlackError as exc:
            answer = {"ok": False, "error": exc.error}
            if exc.errors:
                answer["errors"] = exc.errors
                answer["response_metadata"] = {"messages": [f"[ERROR] {e}" for e in exc.errors]}
        # Slack answers its API errors with HTTP 200 and ok: false.
        workspace.record(method, path, body, HTTPStatus.OK)
        self._answer(200, answer)


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, workspace: Workspace):
        super().__init__(address, Handler)
        self.workspace = workspace


def make_server(host: str, port: int, *, token: str, channels: list[str]) -> StandinServer:
    return StandinServer((host, port), Workspace(token, channels))
