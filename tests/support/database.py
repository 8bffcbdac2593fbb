"""The whole database read back as text, for tests that look for what must
never be stored."""

from django.apps import apps
from django.db import connection


def every_row_as_text() -> str:
    """Every row of every table in the database, read raw; then every model
    of every installed app read again through the ORM (pickled columns, as
    django-q's task arguments and results, unpickled), with what Django and
    django-q store encoded opened: sessions, and the signed task packages
    waiting in the queue."""
    from django.contrib.sessions.models import Session
    from django_q.models import OrmQ

    def readable(value):
        return bytes(value) if isinstance(value, memoryview) else value

    chunks = []
    tables = set(connection.introspection.table_names())
    with connection.cursor() as cursor:
        for table in sorted(tables):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.append(f"{table}: {[tuple(map(readable, row)) for row in cursor.fetchall()]!r}")
    for model in apps.get_models(include_auto_created=True):
        assert model._meta.db_table in tables, f"{model._meta.label} has no table: its rows were not read"
        names = [f.attname for f in model._meta.concrete_fields]
        rows = [tuple(map(readable, row)) for row in model._base_manager.values_list(*names)]
        chunks.append(f"{model._meta.label}: {rows!r}")
    chunks += [repr(session.get_decoded()) for session in Session.objects.all()]
    chunks += [repr(queued.task) for queued in OrmQ.objects.all()]
    return "\n".join(chunks)
