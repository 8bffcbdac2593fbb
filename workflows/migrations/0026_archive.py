"""Retention with a verifiable archive (docs/explanation/operations-at-scale.md#operations-at-scale).

The audit trigger on PostgreSQL gains its one exception: a DELETE of a
workflow stream's events is let through only inside the transaction of
`manage.py archive` that records the workflow as archived (an
ArchivedWorkflow row of the archive named by the transaction-local setting
`durableconsole.archive`, whose head covers each event). UPDATE stays
refused row by row; DELETE is checked once per statement, over every row
it removed (a transition table: one join, where a row trigger would run a
lookup per event), and any row outside the exception aborts it. SQLite has no session settings: there the model and its
queryset refuse deletes, and only workflows.audit.archive deletes, by SQL.

A workflow brought back by `manage.py restore` is read-only: a trigger
refuses every UPDATE of its row, on both databases.
"""

import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models


PG_UP = """
CREATE OR REPLACE FUNCTION workflows_auditevent_delete_guard() RETURNS trigger AS $$
DECLARE
    refused boolean;
BEGIN
    -- EXECUTE: planned afresh each time, for the rows at hand (a plan cached
    -- while the archived table was empty would scan it for every event).
    EXECUTE $q$SELECT EXISTS (SELECT 1 FROM gone g WHERE NOT (
            g.workflow_id IS NOT NULL AND g.stream = g.workflow_id::text
            AND EXISTS (SELECT 1 FROM workflows_archivedworkflow a
                        WHERE a.workflow_id = g.workflow_id AND a.restored_at IS NULL AND a.seq >= g.seq
                          AND a.archive_id = NULLIF(current_setting('durableconsole.archive', true), '')::uuid)))$q$
        INTO refused;
    IF refused THEN
        RAISE EXCEPTION 'audit events are append-only (DELETE refused)' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS workflows_auditevent_append_only ON workflows_auditevent;
CREATE TRIGGER workflows_auditevent_append_only
    BEFORE UPDATE ON workflows_auditevent
    FOR EACH ROW EXECUTE FUNCTION workflows_audit_append_only();
CREATE TRIGGER workflows_auditevent_delete_guard
    AFTER DELETE ON workflows_auditevent REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION workflows_auditevent_delete_guard();
CREATE OR REPLACE FUNCTION workflows_restored_read_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'workflow %% is archived and restored read-only', OLD.id USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER workflows_workflow_restored_read_only
    BEFORE UPDATE ON workflows_workflow
    FOR EACH ROW WHEN (OLD.restored_at IS NOT NULL) EXECUTE FUNCTION workflows_restored_read_only();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS workflows_workflow_restored_read_only ON workflows_workflow;
DROP FUNCTION IF EXISTS workflows_restored_read_only();
DROP TRIGGER IF EXISTS workflows_auditevent_delete_guard ON workflows_auditevent;
DROP FUNCTION IF EXISTS workflows_auditevent_delete_guard();
DROP TRIGGER IF EXISTS workflows_auditevent_append_only ON workflows_auditevent;
CREATE TRIGGER workflows_auditevent_append_only
    BEFORE UPDATE OR DELETE ON workflows_auditevent
    FOR EACH ROW EXECUTE FUNCTION workflows_audit_append_only();
"""
SQLITE_UP = """
CREATE TRIGGER IF NOT EXISTS workflows_workflow_restored_read_only BEFORE UPDATE ON workflows_workflow
WHEN OLD.restored_at IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'workflow is archived and restored read-only'); END;
"""
SQLITE_DOWN = "DROP TRIGGER IF EXISTS workflows_workflow_restored_read_only;"


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
    dependencies = [
        ("workflows", "0025_bulk_jobs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Archive",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("by", models.CharField(max_length=150)),
                ("location", models.CharField(max_length=1000)),
                ("manifest_digest", models.CharField(max_length=64)),
                ("workflows", models.PositiveIntegerField()),
                ("deleted", models.PositiveIntegerField(default=0)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddField(
            model_name="team",
            name="retention_days",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="restored_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="ArchivedWorkflow",
            fields=[
                ("workflow_id", models.UUIDField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=200)),
                ("status", models.CharField(max_length=32)),
                ("created_at", models.DateTimeField()),
                ("archived_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("seq", models.PositiveBigIntegerField()),
                ("head", models.CharField(max_length=64)),
                ("restored_at", models.DateTimeField(blank=True, null=True)),
                (
                    "archive",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="archived", to="workflows.archive"
                    ),
                ),
                (
                    "submitted_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to=settings.AUTH_USER_MODEL
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to="workflows.team"
                    ),
                ),
            ],
        ),
        migrations.RunPython(forwards, backwards),
    ]
