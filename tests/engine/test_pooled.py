"""The pooled leg (`make test-pooled`, docs/deploying.md#pgbouncer) reaches
PostgreSQL through a transaction-mode pooler, as its settings say, and its
LISTEN sessions do not."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dj_database_url
import pytest
from django.conf import settings
from django.db import connection

from workflows.db import listen_params

PROJECT_DIR = Path(__file__).resolve().parents[2]
PG = "postgres://console@db.example.com:6432/console"


def settings_of(**env) -> subprocess.CompletedProcess:
    """The database settings a process with `env` starts with (no database reached)."""
    code = (
        "import django, json; from django.conf import settings; django.setup(); "
        "print(json.dumps([settings.DATABASES['default'], settings.DATABASE_LISTEN_URL], default=str))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_LISTEN_URL", "Q_LISTEN")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_DIR,
        env={**clean, "DJANGO_SETTINGS_MODULE": "durableconsole.settings", "PYTHONPATH": str(PROJECT_DIR), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_behind_a_transaction_pooler_nothing_outlives_a_transaction():
    started = settings_of(DATABASE_URL=PG, DB_TRANSACTION_POOLER="1", DATABASE_LISTEN_URL="postgres://console@db:5432")
    assert started.returncode == 0, started.stderr
    database, listen = json.loads(started.stdout)
    assert database["OPTIONS"]["prepare_threshold"] is None and database["DISABLE_SERVER_SIDE_CURSORS"]
    assert listen == "postgres://console@db:5432"
    # Without the pooler, psycopg's own prepares and Django's cursors stay.
    database, _ = json.loads(settings_of(DATABASE_URL=PG).stdout)
    assert "prepare_threshold" not in database.get("OPTIONS", {})


def test_listen_behind_a_transaction_pooler_needs_a_direct_url_or_polling():
    refused = settings_of(DATABASE_URL=PG, DB_TRANSACTION_POOLER="1")
    assert refused.returncode != 0 and "set DATABASE_LISTEN_URL to a direct connection" in refused.stderr
    assert settings_of(DATABASE_URL=PG, DB_TRANSACTION_POOLER="1", Q_LISTEN="0").returncode == 0


@pytest.mark.pooled
@pytest.mark.django_db
def test_the_pooled_leg_goes_through_the_pooler_and_listens_directly():
    if connection.vendor != "postgresql" or not settings.DB_TRANSACTION_POOLER:
        pytest.skip("the PgBouncer leg only (make test-pooled)")
    direct = dj_database_url.parse(settings.DATABASE_LISTEN_URL)
    connection.ensure_connection()
    # The console's connection ends at the pooler; the server behind it is the direct one.
    assert int(connection.connection.info.port) != int(direct["PORT"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        assert cursor.fetchone()[0] == int(direct["PORT"])
    # No statement is prepared on a session the pooler may hand to another client.
    assert connection.connection.prepare_threshold is None
    assert settings.DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"]
    # LISTEN connects to the server itself, on the database in use.
    params = listen_params()
    assert (int(params["port"]), params["dbname"]) == (int(direct["PORT"]), connection.settings_dict["NAME"])
    assert "prepare_threshold" not in params


def test_the_idle_in_transaction_limit_joins_a_urls_own_options_and_refuses_what_it_cannot_take():
    """DB_IDLE_IN_TRANSACTION_SECONDS reaches PostgreSQL in the `options`
    startup parameter (docs/deploying.md#postgresql): beside those a
    DATABASE_URL gives, never in their place; a second setting of it, a
    value PostgreSQL cannot take or one that is not a number is refused at
    start, saying which."""
    database, _ = json.loads(settings_of(DATABASE_URL=f"{PG}?options=-c%20search_path%3Dconsole").stdout)
    assert database["OPTIONS"]["options"] == "-c search_path=console -c idle_in_transaction_session_timeout=60000"
    database, _ = json.loads(settings_of(DATABASE_URL=PG, DB_IDLE_IN_TRANSACTION_SECONDS="0").stdout)
    assert "options" not in database.get("OPTIONS", {})
    twice = settings_of(DATABASE_URL=f"{PG}?options=-c%20idle_in_transaction_session_timeout%3D5s")
    assert twice.returncode != 0 and "set it once, by DB_IDLE_IN_TRANSACTION_SECONDS" in twice.stderr
    for value, says in [
        ("2147484", "must be at most 2147483"),
        ("-1", "must be at least 0"),
        ("1e3", "must be an integer"),
        ("NaN", "must be an integer"),
    ]:
        refused = settings_of(DATABASE_URL=PG, DB_IDLE_IN_TRANSACTION_SECONDS=value)
        assert refused.returncode != 0 and says in refused.stderr, (value, refused.stderr[-500:])
