"""Run the Slack stand-in (workflows.ops.slack_standin) as its own process."""

import signal
import sys

from django.core.management.base import BaseCommand, CommandError

from workflows.ops.slack_standin import make_server


class Command(BaseCommand):
    help = "Run a local stand-in for Slack's Web API and response URLs (tests, the bench, pictures)."

    # The stand-in shares nothing with the project's database: no checks needed.
    requires_system_checks = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8200, help="port to listen on (default 8200; 0 picks one)")
        parser.add_argument("--token", required=True, help="the bot token it accepts (xoxb-…)")
        parser.add_argument(
            "--channel",
            action="append",
            default=[],
            help="a channel id that exists (repeat for more; default C0REVIEWS)",
        )

    def handle(self, *args, host, port, token, channel, **options):
        if not token.strip():
            raise CommandError("--token must not be empty")
        server = make_server(host, port, token=token, channels=channel or ["C0REVIEWS"])
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.stdout.write(
            f"slack stand-in listening on http://{host}:{server.server_address[1]}/api/ "
            f"(channels {', '.join(server.workspace.channels)})"
        )
        self.stdout.flush()
        try:
            server.serve_forever()
        finally:
            server.server_close()
