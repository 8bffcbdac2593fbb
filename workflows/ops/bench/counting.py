"""What this thread's connection does while the bench watches: the
statements it runs and the commits it makes (the protocol's cost per step
in (b), the queries of a page in (e)); and what the whole PostgreSQL
database writes while real clusters run (the cost per remote step in (g))."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import connection


@contextmanager
def recording_queries():
    """The statements this thread's connection runs (Django's debug log keeps
    at most 9,000 and costs time on every query)."""
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


@contextmanager
def counting_commits():
    """Count the commits of this thread's connection (an outermost
    transaction.atomic ends in connection.commit())."""
    counter = {"commits": 0}
    commit = connection.commit

    def counted():
        counter["commits"] += 1
        commit()

    connection.commit = counted
    try:
        yield counter
    finally:
        del connection.commit


def database_counters() -> dict | None:
    """Where the whole database stands (every session), or None on SQLite:
    the next transaction id (each transaction that writes takes one when it
    first writes) and the write-ahead log's position (every byte any session
    wrote). Both are current at once, unlike pg_stat_database's counts,
    which an idle session may report up to ten seconds late."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()::text")
        xid, lsn = cursor.fetchone()
    high, _, low = lsn.partition("/")
    return {"xid": xid, "wal_bytes": (int(high, 16) << 32) + int(low, 16)}


def per_unit(before: dict | None, after: dict | None, units: int) -> dict | None:
    """What the database did between two readings, per unit of work:
    transactions that wrote, and kilobytes of write-ahead log."""
    if before is None or after is None or not units:
        return None
    return {
        "write_transactions": round((after["xid"] - before["xid"]) / units, 2),
        "wal_kib": round((after["wal_bytes"] - before["wal_bytes"]) / 1024 / units, 2),
    }
