"""Audit rows cannot be changed or removed, even with raw SQL.

PostgreSQL: a trigger refuses UPDATE and DELETE (TRUNCATE, a DBA-level
operation, stays available for test resets). SQLite: a trigger refuses
UPDATE; deletes are refused by the model and its queryset.
"""

from django.db import migrations

PG_UP = """
CREATE OR REPLACE FUNCTION workflows_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only (%% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER workflows_auditevent_append_only
    BEFORE UPDATE OR DELETE ON workflows_auditevent
    FOR EACH ROW EXECUTE FUNCTION workflows_audit_append_only();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS workflows_auditevent_append_only ON workflows_auditevent;
DROP FUNCTION IF EXISTS workflows_audit_append_only();
"""
SQLITE_UP = """
CREATE TRIGGER IF NOT EXISTS workflows_auditevent_no_update BEFORE UPDATE ON workflows_auditevent
BEGIN SELECT RAISE(ABORT, 'audit events are append-only (UPDATE refused)'); END;
"""
SQLITE_DOWN = "DROP TRIGGER IF EXISTS workflows_auditevent_no_update;"


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_UP)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_UP)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_DOWN)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_DOWN)


class Migration(migrations.Migration):
    dependencies = [("workflows", "0004_compensation")]
    operations = [migrations.RunPython(forwards, backwards)]
