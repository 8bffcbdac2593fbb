"""The audit trail as an export streams it, and as an attacker with the
database's rights (not the keys) rewrites it."""

from django.db import connection

from workflows.models import AuditEvent


def streamed(response) -> str:
    assert response.streaming is True
    return b"".join(response.streaming_content).decode()


def _raw(sql, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def tamper(event, **changes):
    """What an attacker with DBA rights would do: lift the guard, rewrite a row."""
    table = AuditEvent._meta.db_table
    if connection.vendor == "postgresql":
        _raw(f"ALTER TABLE {table} DISABLE TRIGGER workflows_auditevent_append_only")
    else:
        _raw("DROP TRIGGER workflows_auditevent_no_update")
    before = AuditEvent.objects.values(*changes).get(pk=event.pk)
    for column, value in changes.items():
        _raw(f"UPDATE {table} SET {column} = %s WHERE id = %s", [value, event.pk])
    assert AuditEvent.objects.values(*changes).get(pk=event.pk) != before
