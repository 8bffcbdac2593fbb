"""The task queue read oldest first (workflows.engine.wakeups.QueueBroker):
an index on django-q2's queue table in the order the broker reads it, so
that taking the next task reads one index entry however long the queue is,
whatever the planner's statistics."""

from django.db import migrations

INDEX = "durableconsole_ormq_order"


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0026_archive"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.RunSQL(
            f'CREATE INDEX IF NOT EXISTS {INDEX} ON django_q_ormq ("key", "lock", "id")',
            f"DROP INDEX IF EXISTS {INDEX}",
        ),
    ]
