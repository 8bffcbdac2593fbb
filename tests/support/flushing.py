"""The wipe after each transactional test, cheaper on PostgreSQL.

Django's `flush` empties every table with one TRUNCATE, which on
PostgreSQL gives each of the ~60 tables new files: about 1.5 s a test on
this machine, for tables that hold a handful of rows, times the ~260
transactional tests of the PostgreSQL leg. A DELETE of every table does
the same in about 0.03 s. It runs with `session_replication_role =
replica`, which turns off the triggers for that transaction: the
append-only guards of the audit tables, which refuse a DELETE (a TRUNCATE
is not a DELETE, so Django's flush passes them), and the foreign key
checks, moot when every row goes. Then the post_migrate signal runs, as
after `flush`, to make the content types and permissions again. Setting
that role needs a superuser; without one, and whenever Django's flush
would do something else (available_apps, serialized rollback), Django's
flush runs. On SQLite the planner's statistics go with the rows.
"""

from django.core.management.sql import emit_post_migrate_signal
from django.db import connections, transaction
from django.db.utils import Error
from django.test import TransactionTestCase

django_teardown = TransactionTestCase._fixture_teardown


def empty_every_table(alias: str) -> bool:
    """Delete every row of every table Django's flush would truncate, as
    one transaction; False, having changed nothing, when the role may not
    turn the triggers off."""
    connection = connections[alias]
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    try:
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
            for table in tables:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
    except Error:
        return False
    emit_post_migrate_signal(verbosity=0, interactive=False, db=alias)
    return True


def forget_planner_statistics(alias: str) -> None:
    """SQLite keeps what ANALYZE found (the archive runs it) in
    `sqlite_stat1`, which no flush empties: the next test's queries would be
    planned for the tables as that test left them. (PostgreSQL's plans are
    checked not to depend on its statistics.)"""
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'")
        if cursor.fetchone():
            cursor.execute("DELETE FROM sqlite_stat1")
            cursor.execute("ANALYZE sqlite_schema")  # makes SQLite read the emptied table again


def fixture_teardown(self: TransactionTestCase) -> None:
    aliases = self._databases_names(include_mirrors=False)
    plain = self.available_apps is None and not self.serialized_rollback
    if plain and all(connections[alias].vendor == "postgresql" for alias in aliases):
        if all(empty_every_table(alias) for alias in aliases):
            return
    django_teardown(self)
    for alias in aliases:
        forget_planner_statistics(alias)


def install() -> None:
    TransactionTestCase._fixture_teardown = fixture_teardown
