"""Small database helpers: the canonical JSON that hashes and seals are
taken over, its SHA-256, one-statement updates of many rows, and one
statement asking whether each of several queries finds a row."""

import hashlib
import json

import dj_database_url
from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connection, connections


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def exist(querysets: dict) -> dict:
    """Which of `querysets` (by key; None for one not to ask) have a row,
    asked in one statement: `SELECT (...) IS NOT NULL, ...`, each its first
    row's key. A queryset keeps its order: ordered by an indexed column,
    its table is walked by that index to the first row whatever the
    planner's statistics say. (Not `EXISTS`: PostgreSQL drops the order of
    an `EXISTS` subquery, and with stale statistics scanned every plan to
    find none due.) All on one database."""
    asked = {key: queryset for key, queryset in querysets.items() if queryset is not None}
    found = dict.fromkeys(querysets, False)
    if not asked:
        return found
    alias = next(iter(asked.values())).db
    parts, params = [], []
    for key, queryset in list(asked.items()):
        try:
            sql, part_params = queryset.values_list("pk")[:1].query.get_compiler(using=alias).as_sql()
        except EmptyResultSet:  # `.none()`, or a filter on an empty list: no row, nothing to ask
            del asked[key]
            continue
        parts.append(f"({sql}) IS NOT NULL")
        params.extend(part_params)
    if not parts:
        return found
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(parts)}", params)
        row = cursor.fetchone()
    found.update({key: bool(value) for key, value in zip(asked, row, strict=True)})
    return found


def update_rows(model, names: list[str], objs: list) -> None:
    """Write each object's values of `names` to its row, in one statement
    (UPDATE ... FROM unnest(arrays) on PostgreSQL, FROM VALUES on SQLite),
    where Django's bulk_update builds a CASE expression per row and field."""
    if not objs:
        return
    fields = [model._meta.get_field(name) for name in names]
    quote = connection.ops.quote_name
    table, pk = quote(model._meta.db_table), quote(model._meta.pk.column)
    columns = [model._meta.pk, *fields]
    if connection.vendor == "postgresql":
        # One typed array per column: the statement's text stays the same
        # whatever the number of rows (short to send, cached by the driver).
        arrays = ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in columns)
        sets = ", ".join(f"{quote(field.column)} = v.c{n}" for n, field in enumerate(fields, start=1))
        aliases = ", ".join(f"c{n}" for n in range(len(columns)))
        params = [
            [field.get_db_prep_save(getattr(obj, field.attname), connection) for obj in objs] for field in columns
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {sets} FROM unnest({arrays}) AS v({aliases}) WHERE {table}.{pk} = v.c0", params
            )
        return
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    sets = ", ".join(f"{quote(field.column)} = v.column{n}" for n, field in enumerate(fields, start=2))
    sql = f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row] * len(objs))}) AS v WHERE {table}.{pk} = v.column1"
    params = []
    for obj in objs:
        params += [field.get_db_prep_save(getattr(obj, field.attname), connection) for field in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def listen_params() -> dict:
    """psycopg connection parameters for a LISTEN session: the default
    database's, or behind a transaction-mode pooler those of
    `DATABASE_LISTEN_URL` (a direct connection), on the database in use
    unless that URL names one (docs/deploying.md#pgbouncer)."""
    params = connections[DEFAULT_DB_ALIAS].get_connection_params()
    if not settings.DATABASE_LISTEN_URL:
        return params
    direct = dj_database_url.parse(settings.DATABASE_LISTEN_URL)
    params.pop("prepare_threshold", None)
    for name, key in (("HOST", "host"), ("PORT", "port"), ("USER", "user"), ("PASSWORD", "password")):
        if direct.get(name):
            params[key] = direct[name]
    if direct.get("NAME"):
        params["dbname"] = direct["NAME"]
    return params
