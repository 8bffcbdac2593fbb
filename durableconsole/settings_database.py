"""The database and how many connections each process holds
(docs/deploying.md#database-connections), and what a transaction-mode
pooler in front of PostgreSQL asks of the connections
(docs/deploying.md#pgbouncer); imported by durableconsole.settings."""

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from workflows.env import env_bool, env_float, env_int, env_str

POSTGRESQL = "django.db.backends.postgresql"
# idle_in_transaction_session_timeout is an int of milliseconds.
MAX_IDLE_IN_TRANSACTION_SECONDS = (2**31 - 1) // 1000

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
        help="Seconds a worker's or a command's database connection is kept for reuse (web processes pool theirs).",
    )
    pool = _web_pool()
    idle_in_transaction = env_int(
        "DB_IDLE_IN_TRANSACTION_SECONDS",
        60,
        minimum=0,
        help="PostgreSQL ends a session left idle inside a transaction this long (0: never), so that a "
        "hung or stopped process does not hold its row locks (and recovery behind them) for ever.",
    )
    if idle_in_transaction > MAX_IDLE_IN_TRANSACTION_SECONDS:
        raise ImproperlyConfigured(
            f"DB_IDLE_IN_TRANSACTION_SECONDS must be at most {MAX_IDLE_IN_TRANSACTION_SECONDS} "
            f"(PostgreSQL's limit); got {idle_in_transaction}"
        )
    # Read whatever the database, so that the settings reference lists them.
    busy_timeout = env_int(
        "SQLITE_BUSY_TIMEOUT", 20, minimum=1, help="Seconds a SQLite writer waits for the write lock."
    )
    test_name = env_str("SQLITE_TEST_NAME", "test.sqlite3", help="File name, in VAR_DIR, of the SQLite test database.")
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
    elif engine in (POSTGRESQL, "django.db.backends.postgresql_psycopg2"):
        config["ENGINE"] = POSTGRESQL
        config["CONN_HEALTH_CHECKS"] = True
        if idle_in_transaction:
            # A process stopped or hung inside a transaction keeps its row
            # locks while its session lives: a step's row locked so would
            # block its recovery after the lease ran out. PostgreSQL ends
            # such a session; the process, if it resumes, finds its
            # transaction gone and reconnects (docs/deploying.md#postgresql).
            # Behind PgBouncer this startup option is not passed on: there
            # it is PgBouncer's `idle_transaction_timeout`.
            options = config.setdefault("OPTIONS", {})
            given = options.get("options", "")
            if "idle_in_transaction_session_timeout" in given:
                raise ImproperlyConfigured(
                    "DATABASE_URL's options set idle_in_transaction_session_timeout: set it once, "
                    "by DB_IDLE_IN_TRANSACTION_SECONDS (0 to leave it to the server)"
                )
            # Kept beside a URL's own `options` (`?options=-c ...`), never in their place.
            timeout = f"-c idle_in_transaction_session_timeout={idle_in_transaction * 1000}"
            options["options"] = f"{given} {timeout}".strip()
        if pool:
            # A pooled connection goes back to the pool at the end of each
            # request: Django refuses persistent connections beside a pool.
            config["CONN_MAX_AGE"] = 0
            config.setdefault("OPTIONS", {})["pool"] = pool
        if DB_TRANSACTION_POOLER:
            # Behind PgBouncer in transaction mode each transaction may get
            # another server session: nothing may outlive one. No prepared
            # statements (psycopg prepares a query run often, per session)
            # and no server-side cursors (a cursor is held across
            # transactions); LISTEN goes on DATABASE_LISTEN_URL.
            config.setdefault("OPTIONS", {})["prepare_threshold"] = None
            config["DISABLE_SERVER_SIDE_CURSORS"] = True
    else:
        raise ImproperlyConfigured(f"DATABASE_URL must be a sqlite:// or postgres:// URL; got engine {engine}")
    return config


def _web_pool() -> dict | None:
    """The pool a web process's threads share on PostgreSQL, or None in any
    other process. The web's entry points (durableconsole.asgi,
    durableconsole.wsgi, `manage.py runserver`) set DB_POOL; a cluster never
    does: django-q2 forks its workers, and a pool's threads and sockets do not
    survive a fork."""
    pooled = env_bool(
        "DB_POOL",
        False,
        help="Take this process's connections from a bounded pool; the web's entry points turn it on, 0 turns it off.",
        shown="on in web processes (gunicorn, runserver), off elsewhere",
    )
    size = env_int(
        "DB_POOL_MAX",
        8,
        minimum=1,
        help="PostgreSQL connections each web process's threads share; a request waits DB_POOL_TIMEOUT for one.",
    )
    timeout = env_float(
        "DB_POOL_TIMEOUT",
        5.0,
        minimum=0.1,
        help="Seconds a web request waits for a free connection before it is answered 503 with Retry-After.",
    )
    # One connection opened ahead, the rest as requests need them, each closed
    # again after ten idle minutes.
    return {"min_size": 1, "max_size": size, "timeout": timeout} if pooled else None


def cluster_connections(step_workers: int, message_workers: int) -> int:
    """The most connections one `qcluster` holds: two per worker process (its
    own and its lease heartbeat's), whatever its effects in flight, plus the
    main loop's, the steps lane's scheduler's and, per lane, the pusher's two
    (queue reads and LISTEN) and the monitor's (docs/deploying.md#workers)."""
    return 2 * (step_workers + message_workers) + 8


def check_cluster_budget(step_workers: int, message_workers: int) -> int:
    """WORKER_DB_CONNECTIONS, after refusing worker counts that would hold more."""
    budget = env_int(
        "WORKER_DB_CONNECTIONS",
        32,
        minimum=cluster_connections(1, 1),
        help="Most PostgreSQL connections one worker cluster may hold: 2 × (Q_WORKERS + Q_MESSAGE_WORKERS) + 8.",
    )
    needed = cluster_connections(step_workers, message_workers)
    if needed > budget:
        raise ImproperlyConfigured(
            f"a cluster of Q_WORKERS={step_workers} and Q_MESSAGE_WORKERS={message_workers} holds up to {needed} "
            f"database connections, more than WORKER_DB_CONNECTIONS={budget}: lower the workers, or raise "
            "WORKER_DB_CONNECTIONS within what PostgreSQL's max_connections leaves "
            "(docs/deploying.md#database-connections)"
        )
    return budget
