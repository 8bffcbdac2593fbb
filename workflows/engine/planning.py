"""Query plans for the engine's transactions that do not depend on planner
statistics or on how many rows the tables hold.

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
