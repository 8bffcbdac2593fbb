"""What one durable step costs, from the counters of the operating system
and of PostgreSQL (docs/performance.md#the-cost-of-a-step): commits, rows
inserted, updated and deleted, bytes of write-ahead log, and the CPU of the
clusters and of the database sessions that serve them, over the window of
a burst, per step.

The window opens before the clusters start, once no session is left on
the bench's database (every earlier session has flushed its statistics on
exit), and closes once the burst's steps are COMPLETE and its queue is
drained: the bench's own session is then closed (its statistics flushed)
and the database's counts read once a second until no row count has moved
for 11 s (an idle session may keep its statistics for PostgreSQL's
ten-second idle interval); the clusters' idle reads meanwhile, at the rate
of that quiet stretch, are taken off the commits, as are the bench's
own reads in the window (its polls, one transaction each, counted as it
makes them). The connections reading the statistics are on the
server's `postgres` database, out of the bench database's counts, but for
the rows by table (`pg_stat_user_tables` answers only in its own
database), read there once no other session is left, before the window
opens, and after its last reading.

CPU is read from /proc, in clock ticks, sampled four times a second and
once more at the window's end, process by process: for each cluster,
every process of its process group (main loop, sentinel, workers, pusher,
monitor) from when the cluster is up, or from its start if it started
later (a recycled worker); for the database, every backend whose
application_name is one of the clusters' (their sessions and LISTEN
connections), none of which existed before the window. A process that
exits loses what it spent since its last sample, and nothing more: what
was counted is kept (a group's total at the end less its total at the
start would take off the whole life of a process gone by the end). Apart
from both, the server's walwriter, checkpointer and background writer,
which serve every database on the server. On SQLite none of this is
measured.
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
# PostgreSQL's PGSTAT_IDLE_INTERVAL (10 s) and a second: the longest an idle session keeps its statistics.
SETTLED = 11.0


def ticks(pid: int) -> int | None:
    """User and system CPU of a process, in clock ticks, from
    /proc/<pid>/stat; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return sum(int(value) for value in fields[11:13])


class GroupCPU:
    """The CPU of clusters' process groups, process by process: the group's
    leader from its ticks when the group was watched (its set-up, before it
    forked the rest, is no step's), every other process from 0 (forked by
    the leader, all it spent is the cluster's work, some of it done before
    the cluster said it was up: a few steps' burst could be over by then,
    and counted nothing); `sample()` reads them again. A process that exits
    keeps what was counted up to its last sample."""

    def __init__(self):
        self.groups: list[int] = []
        self.processes: dict[int, list[int]] = {}  # pid -> [ticks it counts from, ticks at the last sample]

    def watch(self, pgid: int) -> None:
        for pid in group_pids(pgid):
            if (spent := ticks(pid)) is not None:
                self.processes[pid] = [spent if pid == pgid else 0, spent]
        self.groups.append(pgid)  # after its processes' starting ticks: sample() may run meanwhile

    def sample(self) -> None:
        for pgid in tuple(self.groups):
            for pid in group_pids(pgid):
                if (spent := ticks(pid)) is not None:
                    self.processes.setdefault(pid, [0, spent])[1] = spent

    @property
    def ticks(self) -> int:
        return sum(last - first for first, last in self.processes.values())


class StepCost:
    """`with StepCost() as cost:` around a part's fleet; `cost.watch(cluster)`
    for each cluster it starts; `cost.finish()` at the burst's end;
    `cost.per_step(steps)` after."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.enabled = connection.vendor == "postgresql"
        self.clusters = GroupCPU()
        self.names: list[str] = []  # the clusters' application_name
        self.backends: dict[int, int] = {}  # backend pid -> its ticks at the last sample
        self.bench_reads = 0
        self.result: dict | None = None
        self.stopped = threading.Event()
        self.sampler = threading.Thread(target=self._sample, name="bench-cost", daemon=True)

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
        self._close_own_session(everyone=True)
        self.tables = self._tables()
        left = self._close_own_session(everyone=True)  # the reader of the tables too
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
            self.clusters.watch(cluster.process.pid)
            self.names.append(cluster.env["PGAPPNAME"])
        return cluster

    def finish(self) -> None:
        """The burst's end: read the CPU now, the database's counts once they stop moving."""
        if not self.enabled:
            return
        seconds = time.monotonic() - self.began
        self._stop()  # after one last sample
        background = self._background()
        self._close_own_session()
        closed = time.monotonic()
        after, settled = self._settle()
        waited = after["at"] - closed
        # The clusters' idle reads while the statistics settled, at the rate of the quiet stretch that ended it.
        idle = round(after["idle_per_s"] * waited) if settled else 0
        tables = self._tables()  # after the last reading: its own transactions are not in the counts
        before = self.before
        self.result = {
            "seconds": round(seconds, 2),
            "commits": after["xact_commit"] - before["xact_commit"] - self.bench_reads - idle,
            "bench_reads_subtracted": self.bench_reads,
            "settling_seconds": round(waited, 1),
            "idle_commits_per_s": round(after["idle_per_s"], 1),
            "idle_commits_subtracted": idle,
            "rollbacks": after["xact_rollback"] - before["xact_rollback"],
            # Transaction ids taken: every transaction that wrote, in any database of the server.
            "write_transactions": after["xid"] - before["xid"],
            **{name: after[name] - before[name] for name in ROWS},
            "wal_bytes": self._wal_bytes(before["lsn"], after["lsn"]),
            # The server's, every database's: the bench runs alone on it.
            **{name: after[name] - before[name] for name in ("wal_records", "wal_full_page_images", "checkpoints")},
            "worker_cpu_us": self.clusters.ticks * TICK_US,
            "worker_processes": len(self.clusters.processes),
            "database_cpu_us": sum(self.backends.values()) * TICK_US,
            "database_backends": len(self.backends),
            "server_background_cpu_us": sum(
                background[pid] - self.background[pid] for pid in background.keys() & self.background.keys()
            )
            * TICK_US,
            "other_databases_transactions": sum(
                max(0, count - before["others"].get(name, 0)) for name, count in after["others"].items()
            ),
            "tasks_queued_at_start": self.queued,
            "sessions_left_at_start": before["sessions_left"],
            "settled": settled,
            "rows_by_table": self._rows_by_table(self.tables, tables),
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
            "wal_full_page_images": round(window["wal_full_page_images"] / steps, 2),
            "checkpoints": window["checkpoints"],
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

    def _settle(self) -> tuple[dict, bool]:
        """The database's counts once no row count has moved for SETTLED
        seconds, read once a second (an idle session that flushed less than
        a second before may keep its statistics PostgreSQL's ten-second
        idle interval), and whether they settled within a minute; with
        `idle_per_s`, the commits per second of that quiet stretch."""
        after = self._counters()
        quiet_since, deadline = after, after["at"] + 60
        while after["at"] < deadline:
            time.sleep(1.0)
            after = self._counters()
            if any(after[name] != quiet_since[name] for name in ROWS):
                quiet_since = after
            elif after["at"] - quiet_since["at"] >= SETTLED:
                commits = after["xact_commit"] - quiet_since["xact_commit"]
                return {**after, "idle_per_s": commits / (after["at"] - quiet_since["at"])}, True
        return {**after, "idle_per_s": 0.0}, False

    def _counters(self) -> dict:
        self.side.execute("SELECT pg_stat_clear_snapshot()")
        row = self.side.execute(
            "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, "
            "pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text::bigint "
            "FROM pg_stat_database WHERE datname = %s",
            [self.database],
        ).fetchone()
        # The server's other databases (a test database may come or go meanwhile).
        others = self.side.execute(
            "SELECT datname, xact_commit + xact_rollback FROM pg_stat_database WHERE datname NOT IN (%s, 'postgres')",
            [self.database],
        ).fetchall()
        counts = dict(zip(("xact_commit", "xact_rollback", *ROWS, "lsn", "xid"), row, strict=True))
        return {**counts, **self._server_wal(), "others": dict(others), "at": time.monotonic()}

    def _server_wal(self) -> dict[str, int]:
        """The server's WAL records and full-page images (`pg_stat_wal`), and
        its checkpoints so far (`pg_stat_checkpointer` from PostgreSQL 17,
        `pg_stat_bgwriter` before): the first change to a page after a
        checkpoint writes the whole page to the WAL, so a run that crosses
        more checkpoints, or touches more pages between them, writes more
        WAL per step."""
        records, images = self.side.execute("SELECT wal_records, wal_fpi FROM pg_stat_wal").fetchone()
        if self.side.info.server_version >= 170000:
            query = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
        else:
            query = "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        (checkpoints,) = self.side.execute(query).fetchone()
        return {"wal_records": records, "wal_full_page_images": images, "checkpoints": checkpoints}

    def _tables(self) -> dict[str, tuple[int, int, int]]:
        """Rows inserted, updated and deleted so far in each table of the bench's database (read there)."""
        import psycopg

        params = {**self.params, "dbname": self.database}
        with psycopg.connect(**params, autocommit=True) as reader:
            reader.execute("SELECT pg_stat_clear_snapshot()")
            rows = reader.execute("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables")
            return {name: tuple(counts) for name, *counts in rows.fetchall()}

    @staticmethod
    def _rows_by_table(before: dict, after: dict) -> dict[str, list[int]]:
        """[inserted, updated, deleted] in the window, for each table written, most rows first."""
        moved = {
            name: [now - then for now, then in zip(counts, before.get(name, (0, 0, 0)), strict=True)]
            for name, counts in after.items()
        }
        return dict(sorted(((k, v) for k, v in moved.items() if any(v)), key=lambda item: -sum(item[1])))

    def _wal_bytes(self, before: str, after: str) -> int:
        return int(self.side.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [after, before]).fetchone()[0])

    def _background(self) -> dict[int, int]:
        rows = self.side.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = ANY(%s)", [list(BACKGROUND)]
        ).fetchall()
        return {pid: spent for (pid,) in rows if (spent := ticks(pid)) is not None}

    def _sample(self) -> None:
        """The clusters' processes and their sessions' backends, four times a second, and once more when stopped."""
        import psycopg

        with psycopg.connect(**self.params, autocommit=True) as side:
            while True:
                self.clusters.sample()
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
