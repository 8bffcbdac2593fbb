"""Keyed audit links and signed checkpoints (docs/explanation/trust-core.md#keyed-audit).

Rows written before this change are plain SHA-256 links: the new columns
are added with `sha256` and no key as their value, by ALTER TABLE (no row is
updated, which the append-only trigger would refuse). On SQLite, Django adds
a NOT NULL column by rebuilding the table, which drops the table's trigger:
it is created again. Checkpoints get the same append-only guard as events.
"""

from django.db import migrations, models

PG_CHECKPOINT_UP = """
CREATE TRIGGER workflows_auditcheckpoint_append_only
    BEFORE UPDATE OR DELETE ON workflows_auditcheckpoint
    FOR EACH ROW EXECUTE FUNCTION workflows_audit_append_only();
"""
PG_CHECKPOINT_DOWN = "DROP TRIGGER IF EXISTS workflows_auditcheckpoint_append_only ON workflows_auditcheckpoint;"
SQLITE_EVENT_GUARD = """
CREATE TRIGGER IF NOT EXISTS workflows_auditevent_no_update BEFORE UPDATE ON workflows_auditevent
BEGIN SELECT RAISE(ABORT, 'audit events are append-only (UPDATE refused)'); END;
"""
SQLITE_CHECKPOINT_UP = """
CREATE TRIGGER IF NOT EXISTS workflows_auditcheckpoint_no_update BEFORE UPDATE ON workflows_auditcheckpoint
BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only (UPDATE refused)'); END;
"""


def guard_events(apps, schema_editor):
    """After a table rebuild on SQLite (forwards and backwards alike)."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SQLITE_EVENT_GUARD)


def guard_checkpoints(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_CHECKPOINT_UP)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_CHECKPOINT_UP)


def unguard_checkpoints(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_CHECKPOINT_DOWN)


class Migration(migrations.Migration):
    dependencies = [("workflows", "0011_plan_binding_seals")]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, guard_events),
        migrations.AddField(
            model_name="auditevent",
            name="hash_alg",
            field=models.CharField(
                choices=[("sha256", "sha256"), ("hmac-sha256", "hmac-sha256")], default="sha256", max_length=16
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="auditevent",
            name="key_id",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.RunPython(guard_events, migrations.RunPython.noop),
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.PositiveBigIntegerField(unique=True)),
                ("at", models.DateTimeField()),
                ("kid", models.CharField(max_length=64)),
                ("prev", models.CharField(blank=True, default="", max_length=64)),
                ("digest", models.CharField(max_length=64)),
                ("statement", models.BinaryField()),
                ("signature", models.CharField(max_length=128)),
                ("total", models.PositiveBigIntegerField()),
                ("streams", models.PositiveIntegerField()),
                ("changed", models.PositiveIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name="AuditCheckpointHead",
            fields=[
                ("stream", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("seq", models.PositiveBigIntegerField()),
                ("hash", models.CharField(max_length=64)),
            ],
        ),
        migrations.RunPython(guard_checkpoints, unguard_checkpoints),
    ]
