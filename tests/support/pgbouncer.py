"""Run a command with the database behind a real PgBouncer in transaction
mode (docs/deploying.md#pgbouncer), as a fleet of worker hosts would reach
one PostgreSQL: `python tests/support/pgbouncer.py DIRECT_URL -- COMMAND...`.

PgBouncer (Debian's, from apt) is started on a free port in front of the
PostgreSQL of DIRECT_URL; COMMAND runs with `DATABASE_URL` through it (the
database `pooled`, so beside the PostgreSQL leg's own test database),
`DB_TRANSACTION_POOLER=1` and `DATABASE_LISTEN_URL` the direct server, for
LISTEN. pytest-django creates the test database through the pooler and is
told to keep it (`--reuse-db`: a database a pooler still holds sessions on
cannot be dropped through it); it is dropped here, on the direct server,
before and after. Without PgBouncer the leg says so loudly, and fails under
CI=true."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

BINARY = "/usr/sbin/pgbouncer"
DATABASE = "pooled"
TEST_DATABASE = f"test_{DATABASE}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(direct, port: int, workdir: Path) -> str:
    return f"""[databases]
* = host={direct.hostname or "127.0.0.1"} port={direct.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "users.txt"}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
reserve_pool_size = 5
server_idle_timeout = 30
idle_transaction_timeout = 10
ignore_startup_parameters = extra_float_digits,options
logfile = {workdir / "pgbouncer.log"}
pidfile = {workdir / "pgbouncer.pid"}
"""


def drop_test_database(direct_url: str) -> None:
    admin = urlsplit(direct_url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")


def start(direct_url: str, workdir: Path) -> tuple[subprocess.Popen, int]:
    direct = urlsplit(direct_url)
    port = free_port()
    (workdir / "users.txt").write_text(f'"{direct.username or "postgres"}" ""\n')
    (workdir / "pgbouncer.ini").write_text(config(direct, port, workdir))
    command = [BINARY, str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        # PgBouncer will not run as root: it drops to the postgres account.
        account = pwd.getpwnam("postgres")
        os.chown(workdir, account.pw_uid, account.pw_gid)
        for path in workdir.iterdir():
            os.chown(path, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    pooled = direct._replace(netloc=f"{direct.username or 'postgres'}@127.0.0.1:{port}", path="/postgres").geturl()
    while True:
        try:
            with psycopg.connect(pooled, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return process, port
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                log = workdir / "pgbouncer.log"
                raise SystemExit(f"PgBouncer did not start:\n{log.read_text() if log.exists() else ''}") from None
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1:
        raise SystemExit(__doc__)
    direct_url, command = argv[0], argv[2:]
    if not Path(BINARY).exists():
        message = f"!! {BINARY} is missing (apt-get install pgbouncer): the PgBouncer leg was NOT run"
        print(message, file=sys.stderr)
        return 1 if os.environ.get("CI") == "true" else 0
    workdir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    drop_test_database(direct_url)
    process, port = start(direct_url, workdir)
    direct = urlsplit(direct_url)
    user = direct.username or "postgres"
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{user}@127.0.0.1:{port}/{DATABASE}",
        "DATABASE_LISTEN_URL": direct._replace(path="").geturl(),
        "DB_TRANSACTION_POOLER": "1",
    }
    try:
        return subprocess.call(command, env=env)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        drop_test_database(direct_url)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
