"""Run the ticket desk, the demo external system, as its own process."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ticketdesk import serve
from workflows.ticketdesk.server import DEFAULT_THREADS


class Command(BaseCommand):
    help = "Run the ticket desk (a demo external HTTP system with its own SQLite storage)."

    # The desk shares nothing with the project's database: no checks needed.
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8100, help="port to listen on (default 8100; 0 picks one)")
        parser.add_argument(
            "--data",
            default=None,
            help="the desk's SQLite file (default ticketdesk.sqlite3 in settings.VAR_DIR, i.e. var/ under the project)",
        )

        parser.add_argument(
            "--threads",
            type=int,
            default=DEFAULT_THREADS,
            help=f"requests served at once; more wait their turn (default {DEFAULT_THREADS})",
        )

    def handle(self, *args, host, port, data, threads, **options):
        if threads < 1:
            raise CommandError("--threads must be at least 1")
        if data:
            data_path = Path(data)
        else:
            var_dir = getattr(settings, "VAR_DIR", None) or Path(settings.BASE_DIR) / "var"
            data_path = Path(var_dir) / "ticketdesk.sqlite3"
        data_path = data_path.resolve()
        data_path.parent.mkdir(parents=True, exist_ok=True)

        def ready(server):
            bound_port = server.server_address[1]
            self.stdout.write(f"ticket desk listening on http://{host}:{bound_port} (data {data_path}, {threads} threads)")
            self.stdout.flush()

        serve(host, port, data_path, threads=threads, on_ready=ready)
