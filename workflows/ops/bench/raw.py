"""(a) The raw ceiling: the database alone, looping two commits per step
(insert the attempt, then update its outcome) from several client threads;
the durable steps per second of (b) are reported as a ratio of it."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from workflows.ops.bench.common import BenchError


@contextmanager
def raw_clients():
    """A factory of clients, each on its own connection, each running one raw
    step: insert an attempt row and commit, then update its outcome and commit.
    PostgreSQL: Django's own connection parameters and a real table (a
    temporary one is not WAL-logged, so its commits skip the flush a checkpoint
    pays). SQLite: a scratch file beside the database, WAL, synchronous=FULL."""
    name, scratch = f"bench_raw_{uuid.uuid4().hex[:8]}", None
    if connection.vendor == "postgresql":
        mark, id_type = "%s", "bigserial"

        def connect():
            return connection.get_new_connection(connection.get_connection_params())
    else:
        mark, id_type = "?", "integer"
        scratch = Path(connection.settings_dict["NAME"]).with_name(f"{name}.sqlite3")

        def connect():
            raw = sqlite3.connect(scratch, timeout=20, isolation_level="IMMEDIATE", check_same_thread=False)
            raw.execute("PRAGMA journal_mode=WAL")
            raw.execute("PRAGMA synchronous=FULL")
            return raw

    insert = f"INSERT INTO {name} (operation_key, status) VALUES ({mark}, 'REQUESTED') RETURNING id"
    update = f"UPDATE {name} SET status = 'SUCCEEDED', finished_at = CURRENT_TIMESTAMP WHERE id = {mark}"

    def client():
        raw = connect()
        cursor = raw.cursor()

        def step(key):
            cursor.execute(insert, [key])
            ((pk,),) = cursor.fetchall()
            raw.commit()
            cursor.execute(update, [pk])
            raw.commit()

        return step, raw.close

    setup = connect()
    setup.cursor().execute(
        f"CREATE TABLE {name} (id {id_type} PRIMARY KEY, operation_key text NOT NULL, status text"
        " NOT NULL, started_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, finished_at timestamp)"
    )
    setup.commit()
    try:
        yield client
    finally:
        setup.cursor().execute(f"DROP TABLE {name}")
        setup.commit()
        setup.close()
        if scratch:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)


def raw_rate(client, threads: int, seconds: float) -> float:
    clients = [client() for _ in range(threads)]
    counts, errors = [0] * threads, []
    go, stop = threading.Barrier(threads + 1), threading.Event()

    def loop(number, step):
        go.wait()
        try:
            while not stop.is_set():
                step(f"{number}:{counts[number]}")
                counts[number] += 1
        except Exception as exc:  # reported below, in the measuring thread
            errors.append(exc)

    pool = [threading.Thread(target=loop, args=(n, step)) for n, (step, _) in enumerate(clients)]
    for thread in pool:
        thread.start()
    go.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    for _, close in clients:
        close()
    if errors:
        raise BenchError(f"raw loop failed: {errors[0]!r}")
    return sum(counts) / elapsed
