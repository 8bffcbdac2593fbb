"""`make run`: the web console, a worker cluster and the ticket desk, together.

Each runs as its own process group, exactly as it would be started alone;
Ctrl-C (or SIGTERM) stops all of them and leaves nothing behind. The desk
refuses every write without a valid approval proof (docs/explanation/approval-proofs.md#approval-proof,
docs/explanation/decisions.md#bound-decisions), trusting the key set the console publishes, so the demo shows that no
effect lands that a person did not approve.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from workflows.ops import demo
from workflows.ops.demo import PASSWORD, USERS


def _die_with_parent() -> None:
    """On Linux, have the kernel SIGTERM a child if this process dies, even by
    SIGKILL, so nothing is left behind whatever stops the demo."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


KEYS_WAIT_SECONDS = 60


def keys_url(web: str) -> str:
    """Where the desk reads the console's key set: over loopback, where a
    plain http fetch is trusted."""
    port = web.rpartition(":")[2]
    return f"http://127.0.0.1:{port}/.well-known/jwks.json"


def demo_commands(web: str, desk_port: int) -> dict[str, list[str]]:
    """The demo's processes, in the order they start: the desk last, once
    the console publishes the keys it checks proofs against."""
    manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
    return {
        "web": manage + ["runserver", web, "--noreload"],
        "worker": manage + ["qcluster"],
        "ticket desk": manage
        + [
            "ticketdesk",
            "--port",
            str(desk_port),
            "--require-approval-proof",
            "--jwks",
            keys_url(web),
            "--audience",
            f"http://127.0.0.1:{desk_port}",
        ],
    }


def shell_command(*args: str) -> str:
    """`manage.py ARGS` as a person types it at the repository's root in a
    fresh shell: this interpreter (the project's .venv) and what this
    process was told that picks the database and lets it start (DEBUG,
    VAR_DIR, a DATABASE_URL without a password: one with a password is
    left for the person to set, never printed)."""
    python = sys.executable
    relative = os.path.relpath(python, settings.BASE_DIR)
    if not relative.startswith(os.pardir):
        python = relative
    env = ["DEBUG=1"] if settings.DEBUG else []
    for name in ("VAR_DIR", "DATABASE_URL"):
        value = os.environ.get(name)
        if value and not (name == "DATABASE_URL" and urllib.parse.urlsplit(value).password):
            env.append(f"{name}={shlex.quote(value)}")
    return " ".join([*env, shlex.join([python, "manage.py", *args])])


def banner(web: str, desk_port: int) -> str:
    """What the demo prints once everything runs: where things are, who
    signs in, what waits for each role, and commands that run as printed
    (each after a `$ `)."""
    url = f"http://{web}"
    lines = [
        f"  console      {url}/",
        f"  API          {url}/api/v1/  (schema: /api/v1/openapi.json, docs: /api/v1/docs)",
        f"  ticket desk  http://127.0.0.1:{desk_port}/tickets",
        f"  logins       {', '.join(USERS)}  (password: {PASSWORD})",
        "  waiting for you:",
    ]
    lines += [f"    {role:<10} {what}: {url}{path}" for role, what, path in demo.tasks()]
    lines += [
        f"  API token    $ {shell_command('issue_token', 'agent', '--name', 'demo')}",
        f"               then: curl -H 'Authorization: Bearer <token>' {url}/api/v1/workflows",
        f"  audit chain  $ {shell_command('verify_audit')}",
    ]
    return "\n".join(lines)


def _port(text: str) -> int:
    """A TCP port, 1 to 65535 (`make run PORT=... DESK_PORT=...`)."""
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise CommandError(f"a port is a whole number from 1 to 65535, not {text!r}")
    return int(text)


class Command(BaseCommand):
    help = "Migrate, seed the demo, and run web + worker + ticket desk until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--web", default="127.0.0.1:8000", help="HOST:PORT the console listens on.")
        parser.add_argument("--desk-port", default="8100", help="The ticket desk's port.")

    def handle(self, *args, web, desk_port, **options):
        host, _, port = web.rpartition(":")
        if not host:
            raise CommandError(f"--web is HOST:PORT, not {web!r}")
        web, desk_port = f"{host}:{_port(port)}", _port(str(desk_port))
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        # This process only watches its children from here on: it holds no connection meanwhile.
        connections.close_all()
        # The demo's receivers listen on loopback: webhooks and http.post may call them.
        env = {
            "WEBHOOK_ALLOW_PRIVATE": "1",
            **os.environ,
            "TICKET_DESK_URL": f"http://127.0.0.1:{desk_port}",
            "PYTHONUNBUFFERED": "1",
        }
        commands = demo_commands(web, desk_port)
        children = {}
        stop = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.append(True))
        try:
            for name, command in commands.items():
                if name == "ticket desk" and not self._keys_published(keys_url(web), children, stop):
                    break
                children[name] = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_die_with_parent)
            else:
                self._announce(web, desk_port)
            while not stop:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with code {child.returncode}; stopping everything")
                        stop.append(False)
                time.sleep(0.3)
        finally:
            self._stop_all(children)
        if stop and stop[0] is False:
            sys.exit(1)

    def _keys_published(self, url, children, stop) -> bool:
        """Wait until the console serves its key set, which the desk reads
        as it starts; False when stopped or a child exited meanwhile."""
        deadline = time.monotonic() + KEYS_WAIT_SECONDS
        while not stop:
            try:
                with urllib.request.urlopen(url, timeout=1):  # noqa: S310 (our own loopback URL)
                    return True
            except OSError:
                pass
            if any(child.poll() is not None for child in children.values()) or time.monotonic() > deadline:
                self.stderr.write(f"the console did not serve {url}; stopping everything")
                stop.append(False)
                return False
            time.sleep(0.3)
        return False

    def _announce(self, web, desk_port):
        self.stdout.write(self.style.SUCCESS("\nDurable Console is running"))
        self.stdout.write(banner(web, desk_port))
        self.stdout.write("Press Ctrl-C to stop all of it.\n")

    def _stop_all(self, children):
        for child in children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for child in children.values():
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
        self.stdout.write("Stopped web, worker and ticket desk.")
