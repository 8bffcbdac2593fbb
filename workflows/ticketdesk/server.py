"""The desk's HTTP side: the request handler, the server, ``make_server`` and ``serve``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from workflows.ticketdesk.errors import DeskError
from workflows.ticketdesk.faults import parse_fault
from workflows.ticketdesk.proofs import ProofGate, guarded
from workflows.ticketdesk.store import Desk

MAX_BODY_BYTES = 1024 * 1024
DEFAULT_THREADS = 256
# The request kinds the concurrency probe counts (GET /_concurrency).
PROBED = ("POST /tickets", "POST /tickets/{id}/comments", "POST /tickets/{id}/close", "GET /tickets")


def _verbose() -> bool:
    return os.environ.get("TICKETDESK_VERBOSE", "").strip().lower() not in ("", "0", "false", "no", "off")


class DropConnection(Exception):
    """Close the connection without answering (commit_then_drop)."""


def _required_text(data: dict, field: str) -> str:
    value = data.get(field)
    if not isinstance(value, str) or not value.strip():
        raise DeskError(400, "invalid_request", f"{field} is required and must be a non-empty string")
    return value


def _ticket_id(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise DeskError(404, "not_found", f"no ticket {raw}")
    return int(raw)


def _traceparent(raw: str | None) -> str | None:
    """A W3C trace context header as sent, if it has the form of one."""
    if raw and re.fullmatch(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", raw.strip()):
        return raw.strip()
    return None


def probe_kind(method: str, path: str) -> str | None:
    """The probed kind of a request (``PROBED``), or None."""
    parts = path.strip("/").split("/")
    if parts == ["tickets"] and method in ("GET", "POST"):
        return f"{method} /tickets"
    if method == "POST" and len(parts) == 3 and parts[0] == "tickets" and parts[2] in ("comments", "close"):
        return f"POST /tickets/{{id}}/{parts[2]}"
    return None


class Concurrency:
    """Requests in flight per probed kind, and the most seen at once since
    the last reset: how tests see that requests overlapped, without timing."""

    def __init__(self):
        self._lock = threading.Lock()
        self._now = dict.fromkeys(PROBED, 0)
        self._max = dict.fromkeys(PROBED, 0)

    @contextlib.contextmanager
    def track(self, kind: str | None):
        if kind is None:
            yield
            return
        with self._lock:
            self._now[kind] += 1
            self._max[kind] = max(self._max[kind], self._now[kind])
        try:
            yield
        finally:
            with self._lock:
                self._now[kind] -= 1

    def snapshot(self) -> dict:
        with self._lock:
            return {"in_flight": dict(self._now), "max_in_flight": dict(self._max)}

    def reset(self) -> dict:
        """Start the high-water marks again from what is in flight now."""
        with self._lock:
            self._max = dict(self._now)
            return {"in_flight": dict(self._now), "max_in_flight": dict(self._max)}


class DeskHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "TicketDesk/1.0"
    timeout = 120  # drop idle keep-alive connections eventually

    server: DeskServer

    # -- plumbing -----------------------------------------------------------

    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        if _verbose():
            sys.stderr.write(f"{self.address_string()} - [{self.log_date_time_string()}] {format % args}\n")

    def send_json(self, status: int, payload, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        # Errors raised by the base class (bad request line, unsupported
        # method...) answer JSON like everything else.
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self.close_connection = True
        body = {"error": {"code": phrase.lower().replace(" ", "_"), "message": message or phrase}}
        if code in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED) or code < 200:
            self.send_response(code, message)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_json(code, body)

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks, total = [], 0
            while True:
                size_line = self.rfile.readline(1024)
                try:
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    self.close_connection = True
                    raise DeskError(400, "bad_request", "malformed chunked body") from None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY_BYTES:
                    self.close_connection = True
                    raise DeskError(413, "too_large", "request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(chunks)
        raw_length = self.headers.get("Content-Length")
        if not raw_length:
            return b""
        try:
            length = int(raw_length)
        except ValueError:
            self.close_connection = True
            raise DeskError(400, "bad_request", "bad Content-Length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise DeskError(413, "too_large", "request body too large")
        return self.rfile.read(length)

    @staticmethod
    def parse_json(raw: bytes):
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DeskError(400, "invalid_json", f"body is not valid JSON: {exc}") from None

    @classmethod
    def parse_object(cls, raw: bytes) -> dict:
        data = cls.parse_json(raw)
        if not isinstance(data, dict):
            raise DeskError(400, "invalid_request", "body must be a JSON object")
        return data

    def idempotency_key(self) -> str | None:
        key = self.headers.get("Idempotency-Key")
        if key is None or key.strip() == "":
            return None
        return key.strip()

    # -- dispatch -----------------------------------------------------------

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_PATCH(self):
        self.dispatch()

    def dispatch(self) -> None:
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        if path.startswith("/_"):
            # The desk's own controls (faults, ledger, reset, concurrency)
            # take no slot: a test clears a latency fault while every slot
            # waits in it.
            self.answer(path, split.query)
            return
        with self.server.slots, self.server.concurrency.track(probe_kind(self.command, path)):
            self.answer(path, split.query)

    def answer(self, path: str, raw_query: str) -> None:
        desk = self.server.desk
        drop = False
        try:
            try:
                body = self.read_body()
                query = parse_qs(raw_query, keep_blank_values=True)
                # A write without a valid approval proof changes nothing and
                # takes no fault: the desk refuses it before anything else.
                approval = None
                if self.server.proofs is not None and guarded(self.command, path):
                    approval = self.server.proofs.check(self.command, self.path, body, self.headers)
                if self.command == "POST" and (path == "/tickets" or path.startswith("/tickets/")):
                    drop = self.apply_faults(desk)
                with desk.calling(_traceparent(self.headers.get("traceparent"))):
                    status, payload, headers = self.route(desk, path, query, body, approval)
            except DeskError as exc:
                status = exc.status
                payload = {"error": {"code": exc.code, "message": exc.message}}
                headers = exc.headers
            if drop:
                # commit_then_drop: whatever happened is done (and in the
                # ledger if it changed something); answer nothing.
                raise DropConnection()
            self.send_json(status, payload, headers)
        except DropConnection:
            self.close_connection = True  # answer nothing; the server closes the socket
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # pragma: no cover - last resort
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True
            with contextlib.suppress(Exception):
                self.send_json(500, {"error": {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}})

    def apply_faults(self, desk: Desk) -> bool:
        """Apply faults to a POST on /tickets; returns True to drop the answer.
        The latency sleeps before the store is touched, holding no lock, so
        concurrent requests wait side by side rather than in turn."""
        delay = desk.faults.latency_ms()
        if delay:
            time.sleep(delay / 1000)
        fault = desk.faults.take_answering()
        if fault is None:
            return False
        if fault["mode"] == "error":
            raise DeskError(
                fault["status"], "injected_fault", f"injected fault #{fault['id']}: status {fault['status']}"
            )
        if fault["mode"] == "rate_limit":
            retry_after = fault["retry_after"]
            header = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
            raise DeskError(429, "rate_limited", f"rate limited; retry after {header} s", {"Retry-After": header})
        return True  # commit_then_drop

    def route(
        self, desk: Desk, path: str, query: dict, body: bytes, approval: dict | None = None
    ) -> tuple[int, object, dict]:
        method = self.command
        parts = path.strip("/").split("/") if path != "/" else []

        def allow(*methods: str) -> None:
            if method not in methods:
                raise DeskError(
                    405, "method_not_allowed", f"{method} not allowed on {path}", {"Allow": ", ".join(methods)}
                )

        if parts == ["tickets"]:
            allow("GET", "POST")
            if method == "GET":
                if "idempotency_key" in query:
                    return 200, desk.list_tickets(query["idempotency_key"][0]), {}
                return 200, desk.list_tickets(), {}
            data = self.parse_object(body)
            title = _required_text(data, "title")
            text = data.get("body", "")
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise DeskError(400, "invalid_request", "body must be a string")
            ignore = desk.faults.take_ignore_idempotency()
            status, ticket = desk.create_ticket(
                title, text, self.idempotency_key(), ignore_idempotency=ignore, approval=approval
            )
            return status, ticket, {}

        if len(parts) == 2 and parts[0] == "tickets":
            allow("GET")
            return 200, desk.get_ticket(_ticket_id(parts[1])), {}

        if len(parts) == 3 and parts[0] == "tickets" and parts[2] == "comments":
            allow("POST")
            ticket_id = _ticket_id(parts[1])
            text = _required_text(self.parse_object(body), "body")
            status, comment = desk.add_comment(ticket_id, text, self.idempotency_key(), approval=approval)
            return status, comment, {}

        if len(parts) == 3 and parts[0] == "tickets" and parts[2] == "close":
            allow("POST")
            status, ticket = desk.close_ticket(_ticket_id(parts[1]), self.idempotency_key(), approval=approval)
            return status, ticket, {}

        if parts == ["_ledger"]:
            allow("GET")
            return 200, desk.ledger(), {}

        if parts == ["_faults"]:
            allow("GET", "POST", "DELETE")
            if method == "GET":
                return 200, desk.faults.list(), {}
            if method == "DELETE":
                return 200, {"cleared": desk.faults.clear()}, {}
            return 201, desk.faults.add(parse_fault(self.parse_json(body))), {}

        if len(parts) == 2 and parts[0] == "_faults":
            allow("DELETE")
            if not parts[1].isdigit() or not desk.faults.remove(int(parts[1])):
                raise DeskError(404, "not_found", f"no fault {parts[1]}")
            return 200, {"cleared": 1}, {}

        if parts == ["_concurrency"]:
            allow("GET", "DELETE")
            if method == "GET":
                return 200, self.server.concurrency.snapshot(), {}
            return 200, self.server.concurrency.reset(), {}

        if parts == ["_reset"]:
            allow("POST")
            desk.reset()
            return 200, {"reset": True}, {}

        raise DeskError(404, "not_found", f"no such path: {path}")


class DeskServer(ThreadingHTTPServer):
    """A thread per connection, and at most ``threads`` requests served at
    once (a semaphore taken from reading a request to sending its answer;
    the desk's own ``/_`` controls take none).
    Idle keep-alive connections cost a blocked thread but no slot, so
    clients that keep connections open cannot starve the others; requests
    beyond the bound wait for a slot."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: a burst of concurrent
    # clients would see connection resets instead of waiting their turn.
    request_queue_size = 1024

    def __init__(self, address, desk: Desk, threads: int = DEFAULT_THREADS, proofs: ProofGate | None = None):
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.desk = desk
        # With --require-approval-proof: the gate every write passes.
        self.proofs = proofs
        self.concurrency = Concurrency()
        self.threads = threads
        self.slots = threading.BoundedSemaphore(threads)
        super().__init__(address, DeskHandler)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)) and not _verbose():
            return
        super().handle_error(request, client_address)


def make_server(
    host: str, port: int, data_path: str | os.PathLike, threads: int = DEFAULT_THREADS, proofs: ProofGate | None = None
) -> DeskServer:
    """Open (or create) the desk's storage and bind its HTTP server.

    ``port`` 0 picks a free port; read it back from ``server.server_address``.
    """
    return DeskServer((host, port), Desk(data_path), threads, proofs)


def serve(
    host: str,
    port: int,
    data_path: str | os.PathLike,
    *,
    threads: int = DEFAULT_THREADS,
    on_ready: Callable[[DeskServer], None] | None = None,
    proofs: ProofGate | None = None,
) -> None:
    """Run the desk until SIGTERM or SIGINT, then close it and return."""
    server = make_server(host, port, data_path, threads, proofs)
    stopping = threading.Event()

    def stop(signum, frame):
        if not stopping.is_set():
            stopping.set()
            # shutdown() waits for serve_forever() to return, so it cannot be
            # called from the thread running serve_forever().
            threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, stop)
    try:
        if on_ready is not None:
            on_ready(server)
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
