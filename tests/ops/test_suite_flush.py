"""The wipe after a transactional test leaves no row behind for the next
one, on PostgreSQL by the cheaper DELETE of tests/support/flushing.py, the
audit tables' append-only guards included."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import TransactionTestCase

from tests.support import flushing
from tests.support.plans import ticket_plan
from workflows import roles, teams
from workflows.models import AuditEvent, Team

# The tests that run on PostgreSQL also run through PgBouncer in transaction mode (`pooled`).

# Made again by the post_migrate signal after every flush, as after Django's:
# content types and permissions by Django, the role groups and the default
# team by workflows.apps, as the migrations made them.
REMADE = {ContentType._meta.db_table, Permission._meta.db_table, Group._meta.db_table, Team._meta.db_table}


def rows_by_table() -> dict[str, int]:
    counts = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return counts


@pytest.mark.pooled
@pytest.mark.django_db(transaction=True)
def test_the_teardown_flush_empties_every_table_the_guarded_audit_tables_too(api):
    assert api["agent"].post("/workflows", ticket_plan("flushed")).status_code == 201
    assert AuditEvent.objects.exists()
    full = {table for table, count in rows_by_table().items() if count}

    TransactionTestCase()._fixture_teardown()

    left = {table: count for table, count in rows_by_table().items() if count and table not in REMADE}
    assert left == {}, f"rows left for the next test (of {sorted(full)})"
    assert ContentType.objects.exists() and Permission.objects.exists()
    assert set(Group.objects.values_list("name", flat=True)) == set(roles.ALL)
    assert list(Team.objects.values_list("name", flat=True)) == [teams.DEFAULT]


@pytest.mark.pooled
@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite runs Django's flush, cheap there")
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_flush_deletes_rather_than_truncates(api):
    assert api["agent"].post("/workflows", ticket_plan("deleted")).status_code == 201

    assert flushing.empty_every_table(connection.alias)

    assert not AuditEvent.objects.exists()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's statistics table; PostgreSQL's plans are pinned")
@pytest.mark.django_db(transaction=True)
def test_on_sqlite_the_flush_takes_the_planner_statistics_with_the_rows(api):
    """What ANALYZE found (the archive runs it) would plan the next test's
    queries for tables as this one left them."""
    assert api["agent"].post("/workflows", ticket_plan("analyzed")).status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("SELECT count(*) FROM sqlite_stat1")
        assert cursor.fetchone()[0] > 0

    TransactionTestCase()._fixture_teardown()

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_stat1")
        assert cursor.fetchone()[0] == 0
