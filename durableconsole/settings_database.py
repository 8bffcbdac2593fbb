"""The database settings (docs/reference/settings.md#settings): DATABASE_URL,
and what a transaction-mode pooler in front of PostgreSQL asks of the
connections (docs/deploying.md#pgbouncer)."""

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from workflows.env import env_bool, env_int, env_str

DB_TRANSACTION_POOLER = env_bool(
    "DB_TRANSACTION_POOLER",
    False,
    help="1 when DATABASE_URL goes through a transaction-mode pooler such as PgBouncer: no prepared "
    "statements nor server-side cursors; LISTEN then needs DATABASE_LISTEN_URL.",
)
# LISTEN needs a session of its own for as long as it listens: behind a
# transaction-mode pooler, a direct connection to the same PostgreSQL
# (docs/deploying.md#pgbouncer). Its host, port and credentials; the
# database is the one DATABASE_URL names unless it names one.
DATABASE_LISTEN_URL = env_str(
    "DATABASE_LISTEN_URL",
    "",
    help="A direct postgres:// URL (no pooler) for the LISTEN connections; DATABASE_URL's when unset.",
)
if DATABASE_LISTEN_URL and not DATABASE_LISTEN_URL.startswith(("postgres://", "postgresql://")):
    raise ImproperlyConfigured("DATABASE_LISTEN_URL must be a postgres:// URL")


def database(var_dir: Path) -> dict:
    """The default database, from DATABASE_URL; the embedded SQLite file in `var_dir` when unset."""
    url = (
        env_str(
            "DATABASE_URL",
            help="The database: `sqlite:///PATH` or `postgres://...`; the embedded SQLite file in VAR_DIR when unset.",
        )
        or f"sqlite:///{var_dir / 'db.sqlite3'}"
    )
    conn_max_age = env_int(
        "DB_CONN_MAX_AGE",
        600,
        minimum=0,
        help="Seconds a database connection is kept for reuse (persistent connections matter for throughput).",
    )
    # Read whatever the database, so that the settings reference lists them.
    busy_timeout = env_int(
        "SQLITE_BUSY_TIMEOUT", 20, minimum=1, help="Seconds a SQLite writer waits for the write lock."
    )
    test_name = env_str("SQLITE_TEST_NAME", "test.sqlite3", help="File name, in var_dir, of the SQLite test database.")

    try:
        config = dj_database_url.parse(url, conn_max_age=conn_max_age)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    engine = config["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        # WAL lets readers run beside the one writer; IMMEDIATE takes the write
        # lock at BEGIN so two writers queue instead of failing mid-transaction;
        # synchronous=FULL because a checkpoint a power cut can undo is no checkpoint.
        config["OPTIONS"] = {
            "timeout": busy_timeout,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
        }
        config["TEST"] = {"NAME": str(var_dir / test_name)}
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    elif engine in ("django.db.backends.postgresql", "django.db.backends.postgresql_psycopg2"):
        config["ENGINE"] = "django.db.backends.postgresql"
        config["CONN_HEALTH_CHECKS"] = True
        if DB_TRANSACTION_POOLER:
            # Behind PgBouncer in transaction mode each transaction may get
            # another server session: nothing may outlive one. No prepared
            # statements (psycopg prepares a query run often, per session)
            # and no server-side cursors (a cursor is held across
            # transactions); LISTEN goes on DATABASE_LISTEN_URL
            # (docs/deploying.md#pgbouncer).
            config["OPTIONS"] = {**config.get("OPTIONS", {}), "prepare_threshold": None}
            config["DISABLE_SERVER_SIDE_CURSORS"] = True
    else:
        raise ImproperlyConfigured(f"DATABASE_URL must be a sqlite:// or postgres:// URL; got engine {engine}")
    return config
