"""Find Redis, or start one: the one helper `.ci/run` and the tests share.

    python3 tests/support/redis_server.py ping     # exit 0 when REDIS_URL (default 127.0.0.1:6379) answers PING
    python3 tests/support/redis_server.py start    # `redis-server --daemonize yes` there, and wait until it answers

`.ci/run` pings, installs redis-server when it is missing, and starts it;
the tests' `redis_url` fixture (tests/conftest.py) pings the same URL and,
when nothing answers, starts a redis-server of its own on a free port.
Standard library only: `.ci/run` runs this before any virtualenv exists.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def configured_url() -> str:
    return os.environ.get("REDIS_URL") or DEFAULT_URL


def _command(*words: str) -> bytes:
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        data = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def ping(url: str, timeout: float = 1.0) -> bool:
    """Whether a Redis server at `url` answers PING (after AUTH, when the
    URL carries a password)."""
    where = urlsplit(url)
    try:
        with socket.create_connection((where.hostname or "127.0.0.1", where.port or 6379), timeout=timeout) as sock:
            if where.password:
                sock.sendall(
                    _command("AUTH", *([unquote(where.username)] if where.username else []), unquote(where.password))
                )
                if not sock.recv(64).startswith(b"+OK"):
                    return False
            sock.sendall(_command("PING"))
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def wait_for(url: str, timeout: float = 10.0, process: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(url):
            return True
        if process is not None and process.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def installed() -> bool:
    return shutil.which("redis-server") is not None


class Server:
    """A redis-server of the tests' own on a free port, without persistence,
    stopped when the session ends."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--logfile",
                str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        if not wait_for(self.url, process=self.process):
            self.__exit__()
            raise RuntimeError(f"redis-server on port {self.port} did not answer; see {log}")
        return self

    def __exit__(self, *exc_info) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def main(argv: list[str]) -> int:
    url = configured_url()
    if argv == ["ping"]:
        return 0 if ping(url) else 1
    if argv == ["start"]:
        where = urlsplit(url)
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                where.hostname or "127.0.0.1",
                "--port",
                str(where.port or 6379),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            check=True,
        )
        if wait_for(url):
            return 0
        print(f"redis-server started but {url} does not answer PING", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
