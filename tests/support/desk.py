"""Start the ticket desk as a real process, for tests.

    desk = TicketDesk(tmp_path / "desk.sqlite3").start()
    requests.post(f"{desk.url}/tickets", json={"title": "t"}, timeout=5)
    desk.fault(mode="error", status=503, count=2)
    assert len(desk.tickets()) == 1
    desk.kill(); desk.start()          # same port, same data file
    desk.stop()                        # SIGTERM; returns the exit code

With ``require_proofs=JWKS_FILE_OR_URL`` the desk refuses writes without a
valid approval proof (``--require-approval-proof``, docs/explanation/approval-proofs.md#approval-proof).

A pytest fixture is a few lines:

    @pytest.fixture
    def desk(tmp_path):
        with TicketDesk(tmp_path / "desk.sqlite3") as desk:
            yield desk

The port is chosen once, so a restarted desk answers on the same URL.  The
process's stdout and stderr go to files next to the data file (or in
``log_dir``), read back by ``output()`` / ``errors()`` and quoted when the
desk fails to start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from workflows.ops.processes import free_port

PROJECT_DIR = Path(__file__).resolve().parents[2]
MANAGE_PY = PROJECT_DIR / "manage.py"


class TicketDeskError(AssertionError):
    """The desk process did not behave (failed to start, stop or answer)."""


class TicketDesk:
    def __init__(
        self,
        data_path: str | os.PathLike | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_dir: str | os.PathLike | None = None,
        env: dict[str, str] | None = None,
        start_timeout: float = 10.0,
        request_timeout: float = 10.0,
        threads: int | None = None,
        require_proofs: str | os.PathLike | None = None,
    ):
        if data_path is None:
            data_path = Path(tempfile.mkdtemp(prefix="ticketdesk-")) / "ticketdesk.sqlite3"
        self.data_path = Path(data_path)
        self.host = host
        self.port = port or free_port(host)
        self.log_dir = Path(log_dir) if log_dir else self.data_path.parent
        self.env = env or {}
        self.start_timeout = start_timeout
        self.request_timeout = request_timeout
        self.threads = threads
        # The console's key set (a file or URL): the desk then requires an
        # approval proof on every write, with its own URL as the audience.
        self.require_proofs = require_proofs
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self._stdout_path: Path | None = None
        self._stderr_path: Path | None = None

    # -- process ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> TicketDesk:
        """Start the process and wait until GET /tickets answers."""
        if self.running:
            raise TicketDeskError(f"ticket desk already running (pid {self.process.pid})")
        self.starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stem = f"ticketdesk-{self.port}-{self.starts}"
        self._stdout_path = self.log_dir / f"{stem}.stdout.log"
        self._stderr_path = self.log_dir / f"{stem}.stderr.log"
        command = [
            sys.executable,
            str(MANAGE_PY),
            "ticketdesk",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data",
            str(self.data_path),
            *(["--threads", str(self.threads)] if self.threads else []),
            *(
                ["--require-approval-proof", "--jwks", str(self.require_proofs), "--audience", self.url]
                if self.require_proofs
                else []
            ),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self._stdout_path, "wb") as out, open(self._stderr_path, "wb") as err:
            self.process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=out, stderr=err)
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                raise TicketDeskError(self._explain("ticket desk exited while starting"))
            try:
                response = requests.get(f"{self.url}/tickets", timeout=1)
                if response.status_code == 200:
                    return
                last_error = RuntimeError(f"GET /tickets answered {response.status_code}")
            except requests.RequestException as exc:
                last_error = exc
            time.sleep(0.05)
        self.kill()
        raise TicketDeskError(
            self._explain(f"ticket desk did not answer within {self.start_timeout} s (last error: {last_error})")
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process and wait for it; returns its exit code (None if not running)."""
        if self.process is None:
            return None
        process = self.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.process = None
                raise TicketDeskError(self._explain(f"ticket desk ignored SIGTERM for {timeout} s")) from None
        self.process = None
        return process.returncode

    def kill(self) -> None:
        """SIGKILL the process (a crash: no clean shutdown) and wait for it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    def restart(self) -> TicketDesk:
        self.stop()
        return self.start()

    def __enter__(self) -> TicketDesk:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def output(self) -> str:
        """What the latest process wrote to stdout."""
        return self._stdout_path.read_text(errors="replace") if self._stdout_path else ""

    def errors(self) -> str:
        """What the latest process wrote to stderr."""
        return self._stderr_path.read_text(errors="replace") if self._stderr_path else ""

    def _explain(self, message: str) -> str:
        return f"{message}\n--- stdout ---\n{self.output()}\n--- stderr ---\n{self.errors()}"

    # -- HTTP -----------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", self.request_timeout)
        return requests.request(method, f"{self.url}{path}", **kwargs)

    def _json(self, method: str, path: str, expect: tuple[int, ...], **kwargs):
        response = self.request(method, path, **kwargs)
        if response.status_code not in expect:
            raise TicketDeskError(f"{method} {path} answered {response.status_code}: {response.text}")
        return response.json()

    def tickets(self, idempotency_key: str | None = None) -> list[dict]:
        params = {"idempotency_key": idempotency_key} if idempotency_key is not None else None
        return self._json("GET", "/tickets", (200,), params=params)

    def ticket(self, ticket_id) -> dict:
        return self._json("GET", f"/tickets/{ticket_id}", (200,))

    def ledger(self) -> list[dict]:
        return self._json("GET", "/_ledger", (200,))

    def fault(self, **spec) -> dict:
        """Inject a fault, e.g. ``fault(mode="error", status=503, count=2)``."""
        return self._json("POST", "/_faults", (201,), json=spec)

    def faults(self) -> list[dict]:
        return self._json("GET", "/_faults", (200,))

    def clear_faults(self) -> None:
        self._json("DELETE", "/_faults", (200,))

    def concurrency(self) -> dict:
        """``{"in_flight": {kind: n}, "max_in_flight": {kind: n}}`` (see the desk's docstring)."""
        return self._json("GET", "/_concurrency", (200,))

    def reset_concurrency(self) -> None:
        self._json("DELETE", "/_concurrency", (200,))

    def reset(self) -> None:
        """Wipe tickets, ledger and faults."""
        self._json("POST", "/_reset", (200,))


def fresh_desk(desk_process, settings):
    desk_process.clear_faults()
    deadline = time.monotonic() + 60
    while any(desk_process.concurrency()["in_flight"].values()):
        assert time.monotonic() < deadline, "the desk still holds an earlier test's requests"
        time.sleep(0.05)
    desk_process.reset()
    settings.TICKET_DESK_URL = desk_process.url
    return desk_process


def console_jwks_file(path) -> Path:
    """The console's published key set (`/.well-known/jwks.json`), written
    to a file a desk can be given: the workers the tests start sign with
    the same key set (DEBUG's, in VAR_DIR)."""
    from workflows.audit import signing

    path = Path(path)
    path.write_text(json.dumps(signing.jwks()))
    return path
