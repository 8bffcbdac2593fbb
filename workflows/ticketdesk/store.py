"""The desk's storage: the SQLite schema and transactions, and the ticket, comment and ledger operations."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from workflows.ticketdesk.errors import DeskError
from workflows.ticketdesk.faults import Faults

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
    at              TEXT NOT NULL,
    traceparent     TEXT
);
"""
# The approval proof a change came with (--require-approval-proof): added
# to ledgers of desks that predate it.
PROOF_COLUMNS = ("proof_wf", "proof_kid", "proof_jti", "proof_approvers")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Desk:
    """The desk's state: its SQLite file and its in-memory faults."""

    def __init__(self, data_path: str | os.PathLike):
        self.data_path = Path(data_path)
        self.faults = Faults()
        self._write_lock = threading.Lock()
        # The W3C `traceparent` of the request being served, per server thread
        # (`calling`): the ledger keeps which trace caused each change.
        self._caller = threading.local()
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise RuntimeError(f"could not put {self.data_path} in WAL mode (got {mode})")
            conn.executescript(SCHEMA)
            present = {row["name"] for row in conn.execute("PRAGMA table_info(ledger)")}
            # Data files from before the ledger kept the approval proof or the caller's trace.
            for column in (*PROOF_COLUMNS, "traceparent"):
                if column not in present:
                    conn.execute(f"ALTER TABLE ledger ADD COLUMN {column} TEXT")
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

    @contextlib.contextmanager
    def calling(self, traceparent: str | None) -> Iterator[None]:
        self._caller.traceparent = traceparent
        try:
            yield
        finally:
            self._caller.traceparent = None

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
            rows = conn.execute(
                "SELECT method, path, idempotency_key, status, at, traceparent, proof_wf, proof_kid,"
                " proof_jti, proof_approvers FROM ledger ORDER BY seq"
            )
            return [ledger_json(row) for row in rows]

    # -- writing ----------------------------------------------------------

    def _record(
        self, conn, method: str, path: str, key: str | None, status: int, at: str, approval: dict | None = None
    ) -> None:
        approval = approval or {}
        approvers = json.dumps(approval["approvers"]) if "approvers" in approval else None
        conn.execute(
            "INSERT INTO ledger (method, path, idempotency_key, status, at, traceparent, proof_wf, proof_kid,"
            " proof_jti, proof_approvers) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                method,
                path,
                key,
                status,
                at,
                getattr(self._caller, "traceparent", None),
                approval.get("wf"),
                approval.get("kid"),
                approval.get("jti"),
                approvers,
            ),
        )

    def create_ticket(
        self, title: str, body: str, key: str | None, *, ignore_idempotency: bool = False, approval: dict | None = None
    ) -> tuple[int, dict]:
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
            self._record(conn, "POST", "/tickets", key, 201, at, approval)
            return 201, self._ticket(conn, cur.lastrowid)

    def add_comment(
        self, ticket_id: int, body: str, key: str | None, *, approval: dict | None = None
    ) -> tuple[int, dict]:
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
            self._record(conn, "POST", f"/tickets/{ticket_id}/comments", key, 201, at, approval)
            row = conn.execute("SELECT id, ticket_id, body, at FROM comments WHERE id = ?", (cur.lastrowid,)).fetchone()
            return 201, comment_json(row)

    def close_ticket(self, ticket_id: int, key: str | None, *, approval: dict | None = None) -> tuple[int, dict]:
        with self.writing() as conn:
            ticket = self._ticket(conn, ticket_id)
            if ticket["status"] == "closed":
                return 200, ticket  # a no-op, so not a change and not in the ledger
            at = utc_now()
            conn.execute("UPDATE tickets SET status = 'closed', closed_at = ? WHERE id = ?", (at, ticket_id))
            self._record(conn, "POST", f"/tickets/{ticket_id}/close", key, 200, at, approval)
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


def ledger_json(row) -> dict:
    """A ledger entry; `proof` is what a required approval proof named (else null)."""
    entry = {name: row[name] for name in ("method", "path", "idempotency_key", "status", "at", "traceparent")}
    entry["proof"] = (
        None
        if row["proof_jti"] is None
        else {
            "wf": row["proof_wf"],
            "approvers": json.loads(row["proof_approvers"] or "[]"),
            "kid": row["proof_kid"],
            "jti": row["proof_jti"],
        }
    )
    return entry


def comment_json(row) -> dict:
    return {"id": row["id"], "ticket_id": row["ticket_id"], "body": row["body"], "at": row["at"]}
