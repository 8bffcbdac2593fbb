"""What one durable step costs, from the counters of the operating system
and of PostgreSQL (docs/performance.md#the-cost-of-a-step): commits, rows
inserted, updated and deleted, bytes of write-ahead log, and the CPU of the
clusters and of the database sessions that serve them, over the window of
a burst, per step.

The window opens before the clusters start, once no session is left on
the bench's database (every earlier session has flushed its statistics on
exit), and closes once the burst's steps are COMPLETE and its queue is
drained: the bench's own session is then closed (its statistics flushed)
and the database's row counts are read until they stop moving (a session
flushes its statistics within about a second of going idle). The bench's
own reads in the window (its polls, one transaction each) are counted and
taken off the commits; the connections reading the statistics are on the
server's `postgres` database, out of the bench database's counts.

CPU is read from /proc, in clock ticks: for each cluster, every process
of its process group (main loop, sentinel, workers, pusher, monitor) with
the children each has reaped (a recycled worker), from when it is up to
the window's end; for the database, every backend whose application_name
is one of the clusters' (their sessions and LISTEN connections), sampled
four times a second since none of them existed before the window (a
backend that exits loses what it spent since its last sample); apart from
both, the server's walwriter, checkpointer and background writer, which
serve every database on the server. On SQLite none of this is measured.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from django.db import connection

from workflows.ops.processes import group_pids

TICK_US = 1_000_000 // os.sysconf("SC_CLK_TCK")
BACKGROUND = ("walwriter", "checkpointer", "background writer")
ROWS = ("tup_inserted", "tup_updated", "tup_deleted")


def ticks(pid: int, reaped: bool = False) -> int | None:
    """User and system CPU of a process (with its reaped children's), in
    clock ticks, from /proc/<pid>/stat; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return sum(int(value) for value in fields[11 : 15 if reaped else 13])


def group_ticks(pgid: int) -> int:
    return sum(ticks(pid, reaped=True) or 0 for pid in group_pids(pgid))


class StepCost:
    """`with StepCost() as cost:` around a part's fleet; `cost.watch(cluster)`
    for each cluster it starts; `cost.finish()` at the burst's end;
    `cost.per_step(steps)` after."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.enabled = connection.vendor == "postgresql"
        self.clusters: dict[int, int] = {}  # process group -> its ticks when it was up
        self.cluster_ticks = 0
        self.names: list[str] = []  # the clusters' application_name
        self.backends: dict[int, int] = {}  # backend pid -> its ticks at the last sample
        self.bench_reads = 0
        self.result: dict | None = None
        self.stopped = threading.Event()
        self.sampler = threading.Thread(target=self._sample_backends, name="bench-cost", daemon=True)

    def __enter__(self) -> StepCost:
        if not self.enabled:
            return self
        import psycopg

        from workflows import queue

        self.database = connection.settings_dict["NAME"]
        self.queued = sum(broker.queue_size() for broker in queue.brokers().values())
        params = {**connection.get_connection_params(), "dbname": "postgres", "application_name": "bench-cost"}
        self.params = params
        self.side = psycopg.connect(**params, autocommit=True)
        left = self._close_own_session(everyone=True)
        self.began = time.monotonic()
        self.before = self._counters()
        self.before["sessions_left"] = left
        self.background = self._background()
        connection.execute_wrappers.append(self._count)
        self.sampler.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if not self.enabled:
            return
        self._stop()
        self.side.close()

    def watch(self, cluster):
        """A cluster of the burst, now up: its CPU counts from here, and its sessions' from their start."""
        if self.enabled:
            self.clusters[cluster.process.pid] = group_ticks(cluster.process.pid)
            self.names.append(cluster.env["PGAPPNAME"])
        return cluster

    def finish(self) -> None:
        """The burst's end: read the CPU now, the database's counts once they stop moving."""
        if not self.enabled:
            return
        seconds = time.monotonic() - self.began
        self.cluster_ticks = sum(max(0, group_ticks(pgid) - up) for pgid, up in self.clusters.items())
        self._stop()
        background = self._background()
        self._close_own_session()
        after, settled = self._counters(), False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            time.sleep(1.1)
            previous, after = after, self._counters()
            if all(after[name] == previous[name] for name in ROWS):
                settled = True
                break
        before = self.before
        self.result = {
            "seconds": round(seconds, 2),
            "commits": after["xact_commit"] - before["xact_commit"] - self.bench_reads,
            "bench_reads_subtracted": self.bench_reads,
            "rollbacks": after["xact_rollback"] - before["xact_rollback"],
            # Transaction ids taken: every transaction that wrote, in any database of the server.
            "write_transactions": after["xid"] - before["xid"],
            **{name: after[name] - before[name] for name in ROWS},
            "wal_bytes": self._wal_bytes(before["lsn"], after["lsn"]),
            "worker_cpu_us": self.cluster_ticks * TICK_US,
            "database_cpu_us": sum(self.backends.values()) * TICK_US,
            "database_backends": len(self.backends),
            "server_background_cpu_us": sum(
                background[pid] - self.background[pid] for pid in background.keys() & self.background.keys()
            )
            * TICK_US,
            "other_databases_transactions": after["others"] - before["others"],
            "tasks_queued_at_start": self.queued,
            "sessions_left_at_start": before["sessions_left"],
            "settled": settled,
        }

    def per_step(self, steps: int) -> dict | None:
        """Per step of the burst, with the window's totals under `window`; None on SQLite."""
        if self.result is None or not steps:
            return None
        window = self.result
        rows = window["tup_inserted"] + window["tup_updated"] + window["tup_deleted"]
        return {
            "commits": round(window["commits"] / steps, 3),
            "write_transactions": round(window["write_transactions"] / steps, 3),
            "rows_inserted": round(window["tup_inserted"] / steps, 2),
            "rows_updated": round(window["tup_updated"] / steps, 2),
            "rows_deleted": round(window["tup_deleted"] / steps, 2),
            "rows_written": round(rows / steps, 2),
            "wal_bytes": round(window["wal_bytes"] / steps),
            "worker_cpu_us": round(window["worker_cpu_us"] / steps),
            "database_cpu_us": round(window["database_cpu_us"] / steps),
            "server_background_cpu_us": round(window["server_background_cpu_us"] / steps),
            "window": {"steps": steps, **window},
        }

    # -- helpers -----------------------------------------------------------

    def _count(self, execute, sql, params, many, context):
        """The bench's own statements in the window: outside a transaction, each is one commit."""
        if not context["connection"].in_atomic_block:
            self.bench_reads += 1
        return execute(sql, params, many, context)

    def _stop(self) -> None:
        if self._count in connection.execute_wrappers:
            connection.execute_wrappers.remove(self._count)
        if self.sampler.is_alive():
            self.stopped.set()
            self.sampler.join()

    def _close_own_session(self, everyone: bool = False, timeout: float = 10.0) -> int:
        """Close the bench's session and wait until it is gone (its statistics
        flushed); `everyone`: until no session is left on the database. The
        sessions still there at the timeout."""
        pid = connection.connection.info.backend_pid if connection.connection else None
        if not connection.in_atomic_block:
            connection.close()
        deadline = time.monotonic() + timeout
        while True:
            (left,) = self.side.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND (%s OR pid = %s)",
                [self.database, everyone, pid],
            ).fetchone()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def _counters(self) -> dict:
        self.side.execute("SELECT pg_stat_clear_snapshot()")
        row = self.side.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, "
            "pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text::bigint, "
            "(SELECT coalesce(sum(xact_commit + xact_rollback), 0)::bigint "
            "FROM pg_stat_database WHERE datname NOT IN (%s, 'postgres')) "
            "FROM pg_stat_database WHERE datname = %s",
            [self.database, self.database],
        ).fetchone()
        return dict(zip(("xact_commit", "xact_rollback", *ROWS, "lsn", "xid", "others"), row, strict=True))

    def _wal_bytes(self, before: str, after: str) -> int:
        return int(self.side.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [after, before]).fetchone()[0])

    def _background(self) -> dict[int, int]:
        rows = self.side.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = ANY(%s)", [list(BACKGROUND)]
        ).fetchall()
        return {pid: spent for (pid,) in rows if (spent := ticks(pid)) is not None}

    def _sample_backends(self) -> None:
        """Every backend of the clusters' sessions, four times a second, and once more when stopped."""
        import psycopg

        with psycopg.connect(**self.params, autocommit=True) as side:
            while True:
                rows = side.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = ANY(%s)",
                    [self.database, list(self.names)],
                ).fetchall()
                for (pid,) in rows:
                    if (spent := ticks(pid)) is not None:
                        self.backends[pid] = spent
                if self.stopped.is_set():
                    return
                self.stopped.wait(self.interval)
