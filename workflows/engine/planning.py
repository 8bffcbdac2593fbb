"""Query plans for the engine's transactions (and the lists' pages) that do
not depend on planner statistics or on how many rows the tables hold.

The engine reads and writes a few rows at a time by key: the stored steps of
the plans a claim starts, their approvals, which of the plans a group
finishes still has steps to run. Without statistics (a fresh burst of plans,
autovacuum behind or off), PostgreSQL takes each key of a `workflow_id IN
(...)` list to match 1/200 of the table, so 64 keys look like a quarter of
it, and it reads the whole table instead of the index: each group of steps
then cost time in proportion to every step ever stored (25-30 ms a statement
at 100,000 steps), and a burst ran slower the larger it was. Inside
`by_key()` a sequential scan is the last resort (`enable_seqscan = off`:
taken only where no index serves), so these statements find their rows
through their indexes whatever the statistics say. Scans are only
discouraged, never forbidden: a small table with no index on a condition is
still read whole, and its plan then costs more than `jit_above_cost`: JIT
compilation, which costs more than such a statement's whole run, is off in
the block too.
"""

from contextlib import contextmanager

from django.db import connection


@contextmanager
def by_key():
    """Inside a transaction on PostgreSQL: the statements of the block are
    planned without sequential scans where an index serves. Set with
    `set_config(..., true)` (the transaction's own setting), and put back as
    it was when the block ends inside a caller's transaction, which is then
    planned as before; a block that raises leaves it to the rollback of its
    transaction or savepoint, which undoes the setting. Open it as the last
    thing of its transaction: `with transaction.atomic(), by_key():`."""
    if connection.vendor != "postgresql" or not connection.in_atomic_block:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_seqscan'), current_setting('jit'),"
            " set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"
        )
        seqscan, jit, _, _ = cursor.fetchone()
    yield
    # In a transaction of its own (the engine's `with transaction.atomic(),
    # by_key():`), its commit ends the setting: no statement more.
    if (seqscan, jit) != ("off", "off") and connection.savepoint_ids:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('enable_seqscan', %s, true), set_config('jit', %s, true)", [seqscan, jit])


@contextmanager
def fixed_plans():
    """Inside a transaction on PostgreSQL: plans for reads in an index's
    order that do not depend on the planner's statistics, which go stale
    when autovacuum is behind or off (a fresh burst of plans has none at
    all). With bitmap scans and sorts off, rows wanted in an order, up to a
    limit, can only be read by walking an index in that order and stopping
    at the limit, and a list of keys only fetched by primary key. The
    claim's ready window is read so (with stale statistics the planner took
    the status index instead, reading and sorting every PENDING step on
    every claim and every tick), and so is a page of a list, newest first
    (`web.pagination.page_by_created`: it read and sorted every plan its
    reader may see, 120 ms for an agent with 100,000 of them).
    Where no index gives the order, the rows are still sorted, at a cost
    the disabled sort makes huge: JIT, which such a cost would call for and
    which costs more than the statement's whole run, is off too. Other
    statements of the transaction are planned as before: the three
    settings are the transaction's own (`set_config(..., true)`), set by one
    statement and put back as they were by another."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_bitmapscan'), current_setting('enable_sort'), current_setting('jit'),"
            " set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true),"
            " set_config('jit', 'off', true)"
        )
        bitmapscan, sort, jit, *_ = cursor.fetchone()
    # A block that raises leaves the settings to the rollback of its
    # transaction or savepoint, which undoes them (`planning.by_key`).
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('enable_bitmapscan', %s, true), set_config('enable_sort', %s, true),"
            " set_config('jit', %s, true)",
            [bitmapscan, sort, jit],
        )
