from django.db import migrations, models

# SQLite adds a column with a database default by rebuilding the table,
# which drops its triggers: the restored plans' read-only guard
# (0026_archive) is made again, as it was.
SQLITE_READ_ONLY = """
CREATE TRIGGER IF NOT EXISTS workflows_workflow_restored_read_only BEFORE UPDATE ON workflows_workflow
WHEN OLD.restored_at IS NOT NULL
BEGIN SELECT RAISE(ABORT, 'workflow is archived and restored read-only'); END;
"""


def read_only_again(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SQLITE_READ_ONLY)


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0040_policy_asks"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="traceparent",
            field=models.CharField(blank=True, db_default="", default="", max_length=55),
        ),
        migrations.RunPython(read_only_again, migrations.RunPython.noop),
    ]
