"""The ticket desk: a small *external* system the console talks to.

It runs as its own process (``python manage.py ticketdesk``) with its own
storage (a SQLite file), and deliberately uses nothing from Django: it stands
in for a third-party HTTP API, so it must not share the project's database,
ORM or settings.

HTTP API (all bodies JSON, errors as ``{"error": {"code", "message"}}``):

    POST   /tickets                  {"title", "body"} + optional Idempotency-Key
                                     201 new ticket, 200 same ticket for a repeated key
    GET    /tickets                  every ticket; ?idempotency_key=K filters by key
    GET    /tickets/{id}             one ticket or 404
    POST   /tickets/{id}/comments    {"body"} + optional Idempotency-Key (per ticket)
    POST   /tickets/{id}/close       200; closing a closed ticket is a no-op
    GET    /_ledger                  every request that changed something, in order
    GET    /_faults                  active faults
    POST   /_faults                  inject a fault (see ``parse_fault``)
    DELETE /_faults                  clear all faults (DELETE /_faults/{id}: one)
    POST   /_reset                   wipe tickets, comments, ledger and faults

Faults apply only to POST requests to ``/tickets`` paths.  Every such POST
first sleeps for the active ``latency`` faults.  Then the oldest active
count-limited "answering" fault (``error``, ``rate_limit``,
``commit_then_drop``) takes that request and loses one from its count, so
injecting ``error`` then ``commit_then_drop`` scripts "503, then a dropped
commit".  ``ignore_idempotency`` (until cleared) makes ``POST /tickets``
create a new ticket even for a repeated key.

Storage: WAL mode, synchronous=FULL, one connection per request, and writes
serialised by a lock plus ``BEGIN IMMEDIATE``.  A change and its ledger row
commit in one transaction, so an answered 2xx is on disk before the answer is
sent.  Faults live in memory only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

__all__ = ["DeskError", "Desk", "make_server", "serve", "parse_fault"]

MAX_BODY_BYTES = 1024 * 1024
BUSY_TIMEOUT_MS = 15_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL DEFAULT '',
    idempotency_key TEXT,
    -- The key that the uniqueness rule holds on.  Equal to idempotency_key,
    -- except for duplicates stored while ignore_idempotency was on (NULL).
    unique_key      TEXT,
    status          TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    created_at      TEXT NOT NULL,
    closed_at       TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS tickets_unique_key
    ON tickets (unique_key) WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS tickets_idempotency_key ON tickets (idempotency_key);

CREATE TABLE IF NOT EXISTS comments (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id       INTEGER NOT NULL REFERENCES tickets (id),
    body            TEXT NOT NULL,
    idempotency_key TEXT,
    at              TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS comments_unique_key
    ON comments (ticket_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS ledger (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    method          TEXT NOT NULL,
    path            TEXT NOT NULL,
    idempotency_key TEXT,
    status          INTEGER NOT NULL,
    at              TEXT NOT NULL
);
"""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _verbose() -> bool:
    return os.environ.get("TICKETDESK_VERBOSE", "").strip().lower() not in ("", "0", "false", "no", "off")


class DeskError(Exception):
    """An error answered to the client as ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


# --------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------

ANSWERING_MODES = ("error", "rate_limit", "commit_then_drop")
FAULT_FIELDS = {
    "error": {"mode", "status", "count"},
    "rate_limit": {"mode", "retry_after", "count"},
    "latency": {"mode", "ms", "count"},
    "commit_then_drop": {"mode", "count"},
    "ignore_idempotency": {"mode", "count"},
}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_fault(spec) -> dict:
    """Validate a fault spec and return it normalised (raises DeskError 400).

    ``count`` defaults to 1 for error, rate_limit and commit_then_drop.
    latency and ignore_idempotency last until cleared unless a count is given.
    """

    def bad(message: str) -> DeskError:
        return DeskError(400, "invalid_fault", message)

    if not isinstance(spec, dict):
        raise bad("a fault must be a JSON object")
    mode = spec.get("mode")
    if mode not in FAULT_FIELDS:
        raise bad(f"mode must be one of {', '.join(sorted(FAULT_FIELDS))}")
    unknown = set(spec) - FAULT_FIELDS[mode]
    if unknown:
        raise bad(f"unknown field(s) for mode {mode}: {', '.join(sorted(unknown))}")

    fault: dict = {"mode": mode}
    if "count" in spec:
        count = spec["count"]
        if not _is_int(count) or count < 1:
            raise bad("count must be a positive integer")
        fault["count"] = count
    elif mode in ANSWERING_MODES:
        fault["count"] = 1

    if mode == "error":
        status = spec.get("status", 503)
        if not _is_int(status) or not 400 <= status <= 599:
            raise bad("status must be an integer from 400 to 599")
        fault["status"] = status
    elif mode == "rate_limit":
        retry_after = spec.get("retry_after", 1)
        if not _is_number(retry_after) or retry_after < 0:
            raise bad("retry_after must be a non-negative number of seconds")
        fault["retry_after"] = retry_after
    elif mode == "latency":
        if "ms" not in spec:
            raise bad("latency needs ms")
        ms = spec["ms"]
        if not _is_number(ms) or ms < 0 or ms > 600_000:
            raise bad("ms must be a number from 0 to 600000")
        fault["ms"] = ms
    return fault


class Faults:
    """The in-memory list of active faults (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[dict] = []
        self._ids = itertools.count(1)

    def add(self, fault: dict) -> dict:
        with self._lock:
            fault = {"id": next(self._ids), **fault}
            self._faults.append(fault)
            return dict(fault)

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(f) for f in self._faults]

    def clear(self) -> int:
        with self._lock:
            n = len(self._faults)
            self._faults.clear()
            return n

    def remove(self, fault_id: int) -> bool:
        with self._lock:
            before = len(self._faults)
            self._faults = [f for f in self._faults if f["id"] != fault_id]
            return len(self._faults) != before

    def _use(self, fault: dict) -> None:
        # Caller holds the lock.  Faults without a count never run out.
        if "count" in fault:
            fault["count"] -= 1
            if fault["count"] <= 0:
                self._faults.remove(fault)

    def latency_ms(self) -> float:
        with self._lock:
            total = 0.0
            for fault in [f for f in self._faults if f["mode"] == "latency"]:
                total += fault["ms"]
                self._use(fault)
            return total

    def take_answering(self) -> dict | None:
        """The oldest error/rate_limit/commit_then_drop fault, used once."""
        with self._lock:
            for fault in self._faults:
                if fault["mode"] in ANSWERING_MODES:
                    taken = dict(fault)
                    self._use(fault)
                    return taken
            return None

    def take_ignore_idempotency(self) -> bool:
        with self._lock:
            for fault in self._faults:
                if fault["mode"] == "ignore_idempotency":
                    self._use(fault)
                    return True
            return False


# --------------------------------------------------------------------------
# Storage and operations
# --------------------------------------------------------------------------


class Desk:
    """The desk's state: its SQLite file and its in-memory faults."""

    def __init__(self, data_path: str | os.PathLike):
        self.data_path = Path(data_path)
        self.faults = Faults()
        self._write_lock = threading.Lock()
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"could not put {self.data_path} in WAL mode (got {mode})")
            conn.executescript(SCHEMA)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.data_path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        finally:
            conn.close()

    @contextlib.contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; commits on success, rolls back on error."""
        with self._write_lock:
            conn = self._connect()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                conn.close()

    # -- reading ----------------------------------------------------------

    @staticmethod
    def _comments(conn, ticket_ids: list[int]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {tid: [] for tid in ticket_ids}
        if not ticket_ids:
            return out
        placeholders = ",".join("?" * len(ticket_ids))
        rows = conn.execute(
            f"SELECT id, ticket_id, body, at FROM comments WHERE ticket_id IN ({placeholders}) ORDER BY id",
            ticket_ids,
        )
        for row in rows:
            out[row["ticket_id"]].append(comment_json(row))
        return out

    def _tickets(self, conn, where: str = "", params: tuple = ()) -> list[dict]:
        rows = conn.execute(f"SELECT * FROM tickets {where} ORDER BY id", params).fetchall()
        comments = self._comments(conn, [row["id"] for row in rows])
        return [ticket_json(row, comments[row["id"]]) for row in rows]

    def _ticket(self, conn, ticket_id: int) -> dict:
        tickets = self._tickets(conn, "WHERE id = ?", (ticket_id,))
        if not tickets:
            raise DeskError(404, "not_found", f"no ticket {ticket_id}")
        return tickets[0]

    def list_tickets(self, idempotency_key: str | None = None) -> list[dict]:
        with self.reading() as conn:
            if idempotency_key is None:
                return self._tickets(conn)
            return self._tickets(conn, "WHERE idempotency_key = ?", (idempotency_key,))

    def get_ticket(self, ticket_id: int) -> dict:
        with self.reading() as conn:
            return self._ticket(conn, ticket_id)

    def ledger(self) -> list[dict]:
        with self.reading() as conn:
            rows = conn.execute("SELECT method, path, idempotency_key, status, at FROM ledger ORDER BY seq")
            return [dict(row) for row in rows]

    # -- writing ----------------------------------------------------------

    @staticmethod
    def _record(conn, method: str, path: str, key: str | None, status: int, at: str) -> None:
        conn.execute(
            "INSERT INTO ledger (method, path, idempotency_key, status, at) VALUES (?, ?, ?, ?, ?)",
            (method, path, key, status, at),
        )

    def create_ticket(self, title: str, body: str, key: str | None, *, ignore_idempotency: bool = False) -> tuple[int, dict]:
        with self.writing() as conn:
            holder = None
            if key is not None:
                holder = conn.execute("SELECT id FROM tickets WHERE unique_key = ?", (key,)).fetchone()
                if holder is not None and not ignore_idempotency:
                    return 200, self._ticket(conn, holder["id"])
            at = utc_now()
            # A duplicate stored while idempotency is ignored does not take the
            # unique key; the first ticket with the key keeps it.
            unique_key = key if holder is None else None
            cur = conn.execute(
                "INSERT INTO tickets (title, body, idempotency_key, unique_key, status, created_at)"
                " VALUES (?, ?, ?, ?, 'open', ?)",
                (title, body, key, unique_key, at),
            )
            self._record(conn, "POST", "/tickets", key, 201, at)
            return 201, self._ticket(conn, cur.lastrowid)

    def add_comment(self, ticket_id: int, body: str, key: str | None) -> tuple[int, dict]:
        with self.writing() as conn:
            self._ticket(conn, ticket_id)  # 404 if unknown
            if key is not None:
                row = conn.execute(
                    "SELECT id, ticket_id, body, at FROM comments WHERE ticket_id = ? AND idempotency_key = ?",
                    (ticket_id, key),
                ).fetchone()
                if row is not None:
                    return 200, comment_json(row)
            at = utc_now()
            cur = conn.execute(
                "INSERT INTO comments (ticket_id, body, idempotency_key, at) VALUES (?, ?, ?, ?)",
                (ticket_id, body, key, at),
            )
            self._record(conn, "POST", f"/tickets/{ticket_id}/comments", key, 201, at)
            row = conn.execute("SELECT id, ticket_id, body, at FROM comments WHERE id = ?", (cur.lastrowid,)).fetchone()
            return 201, comment_json(row)

    def close_ticket(self, ticket_id: int, key: str | None) -> tuple[int, dict]:
        with self.writing() as conn:
            ticket = self._ticket(conn, ticket_id)
            if ticket["status"] == "closed":
                return 200, ticket  # a no-op, so not a change and not in the ledger
            at = utc_now()
            conn.execute("UPDATE tickets SET status = 'closed', closed_at = ? WHERE id = ?", (at, ticket_id))
            self._record(conn, "POST", f"/tickets/{ticket_id}/close", key, 200, at)
            return 200, self._ticket(conn, ticket_id)

    def reset(self) -> None:
        with self.writing() as conn:
            conn.execute("DELETE FROM comments")
            conn.execute("DELETE FROM tickets")
            conn.execute("DELETE FROM ledger")
            conn.execute("DELETE FROM sqlite_sequence")
        self.faults.clear()


def ticket_json(row, comments: list[dict]) -> dict:
    return {
        "id": row["id"],
        "title": row["title"],
        "body": row["body"],
        "idempotency_key": row["idempotency_key"],
        "status": row["status"],
        "comments": comments,
        "created_at": row["created_at"],
        "closed_at": row["closed_at"],
    }


def comment_json(row) -> dict:
    return {"id": row["id"], "ticket_id": row["ticket_id"], "body": row["body"], "at": row["at"]}


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


class DropConnection(Exception):
    """Close the connection without answering (commit_then_drop)."""


def _ticket_id(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise DeskError(404, "not_found", f"no ticket {raw}")
    return int(raw)


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
        desk = self.server.desk
        drop = False
        try:
            try:
                body = self.read_body()
                split = urlsplit(self.path)
                path = split.path.rstrip("/") or "/"
                query = parse_qs(split.query, keep_blank_values=True)
                if self.command == "POST" and (path == "/tickets" or path.startswith("/tickets/")):
                    drop = self.apply_faults(desk)
                status, payload, headers = self.route(desk, path, query, body)
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
        """Apply faults to a POST on /tickets; returns True to drop the answer."""
        delay = desk.faults.latency_ms()
        if delay:
            time.sleep(delay / 1000)
        fault = desk.faults.take_answering()
        if fault is None:
            return False
        if fault["mode"] == "error":
            raise DeskError(fault["status"], "injected_fault", f"injected fault #{fault['id']}: status {fault['status']}")
        if fault["mode"] == "rate_limit":
            retry_after = fault["retry_after"]
            header = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
            raise DeskError(429, "rate_limited", f"rate limited; retry after {header} s", {"Retry-After": header})
        return True  # commit_then_drop

    def route(self, desk: Desk, path: str, query: dict, body: bytes) -> tuple[int, object, dict]:
        method = self.command
        parts = path.strip("/").split("/") if path != "/" else []

        def allow(*methods: str) -> None:
            if method not in methods:
                raise DeskError(405, "method_not_allowed", f"{method} not allowed on {path}", {"Allow": ", ".join(methods)})

        if parts == ["tickets"]:
            allow("GET", "POST")
            if method == "GET":
                if "idempotency_key" in query:
                    return 200, desk.list_tickets(query["idempotency_key"][0]), {}
                return 200, desk.list_tickets(), {}
            data = self.parse_json(body)
            if not isinstance(data, dict):
                raise DeskError(400, "invalid_request", "body must be a JSON object")
            title = data.get("title")
            if not isinstance(title, str) or not title.strip():
                raise DeskError(400, "invalid_request", "title is required and must be a non-empty string")
            text = data.get("body", "")
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise DeskError(400, "invalid_request", "body must be a string")
            ignore = desk.faults.take_ignore_idempotency()
            status, ticket = desk.create_ticket(title, text, self.idempotency_key(), ignore_idempotency=ignore)
            return status, ticket, {}

        if len(parts) == 2 and parts[0] == "tickets":
            allow("GET")
            return 200, desk.get_ticket(_ticket_id(parts[1])), {}

        if len(parts) == 3 and parts[0] == "tickets" and parts[2] == "comments":
            allow("POST")
            ticket_id = _ticket_id(parts[1])
            data = self.parse_json(body)
            if not isinstance(data, dict):
                raise DeskError(400, "invalid_request", "body must be a JSON object")
            text = data.get("body")
            if not isinstance(text, str) or not text.strip():
                raise DeskError(400, "invalid_request", "body is required and must be a non-empty string")
            status, comment = desk.add_comment(ticket_id, text, self.idempotency_key())
            return status, comment, {}

        if len(parts) == 3 and parts[0] == "tickets" and parts[2] == "close":
            allow("POST")
            status, ticket = desk.close_ticket(_ticket_id(parts[1]), self.idempotency_key())
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

        if parts == ["_reset"]:
            allow("POST")
            desk.reset()
            return 200, {"reset": True}, {}

        raise DeskError(404, "not_found", f"no such path: {path}")


class DeskServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: a burst of concurrent
    # clients would see connection resets instead of waiting their turn.
    request_queue_size = 128

    def __init__(self, address, desk: Desk):
        self.desk = desk
        super().__init__(address, DeskHandler)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)) and not _verbose():
            return
        super().handle_error(request, client_address)


def make_server(host: str, port: int, data_path: str | os.PathLike) -> ThreadingHTTPServer:
    """Open (or create) the desk's storage and bind its HTTP server.

    ``port`` 0 picks a free port; read it back from ``server.server_address``.
    """
    return DeskServer((host, port), Desk(data_path))


def serve(
    host: str,
    port: int,
    data_path: str | os.PathLike,
    *,
    on_ready: Callable[[ThreadingHTTPServer], None] | None = None,
) -> None:
    """Run the desk until SIGTERM or SIGINT, then close it and return."""
    server = make_server(host, port, data_path)
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
