"""Who did it, precisely (docs/explanation/teams.md#teams): identity columns on audit events,
and the provider identities SSO users sign in as.

The audit columns are added empty (no row is updated, which the append-only
trigger would refuse); on SQLite Django adds them by rebuilding the table,
which drops the table's trigger: it is created again, as in 0012.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

SQLITE_EVENT_GUARD = """
CREATE TRIGGER IF NOT EXISTS workflows_auditevent_no_update BEFORE UPDATE ON workflows_auditevent
BEGIN SELECT RAISE(ABORT, 'audit events are append-only (UPDATE refused)'); END;
"""


def guard_events(apps, schema_editor):
    """After a table rebuild on SQLite (forwards and backwards alike)."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(SQLITE_EVENT_GUARD)


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0022_team_scope"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, guard_events),
        migrations.AddField(
            model_name="auditevent",
            name="subject",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="issuer",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="token_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=16),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="client_address",
            field=models.CharField(blank=True, db_default="", default="", max_length=45),
        ),
        migrations.RunPython(guard_events, migrations.RunPython.noop),
        migrations.CreateModel(
            name="ProviderIdentity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=255)),
                ("subject", models.CharField(max_length=255)),
                ("groups", models.JSONField(blank=True, default=list)),
                ("signed_in_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="provider_identity",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("issuer", "subject"), name="provider_identity_unique")],
            },
        ),
    ]
