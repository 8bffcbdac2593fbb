"""Run the ticket desk, the demo external system, as its own process."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ticketdesk import serve
from workflows.ticketdesk.proofs import ProofGate
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

        parser.add_argument(
            "--require-approval-proof",
            action="store_true",
            help="refuse (403 approval_proof_invalid) every write without a valid Approval-Proof "
            "(docs/explanation/approval-proofs.md#approval-proof)",
        )
        parser.add_argument(
            "--jwks",
            default=None,
            help="the console's public keys: a JWK set file, or its /.well-known/jwks.json URL (https; http only "
            "to a loopback host)",
        )
        parser.add_argument(
            "--audience", default=None, help="this desk's origin as the proofs name it, e.g. https://desk.example.com"
        )

    def handle(self, *args, host, port, data, threads, require_approval_proof, jwks, audience, **options):
        if threads < 1:
            raise CommandError("--threads must be at least 1")
        proofs = None
        if require_approval_proof:
            if not jwks or not audience:
                raise CommandError("--require-approval-proof needs --jwks URL_OR_FILE and --audience ORIGIN")
            try:
                proofs = ProofGate(jwks, audience)
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot use the key set {jwks}: {exc}") from None
        elif jwks or audience:
            raise CommandError("--jwks and --audience go with --require-approval-proof")
        if data:
            data_path = Path(data)
        else:
            var_dir = getattr(settings, "VAR_DIR", None) or Path(settings.BASE_DIR) / "var"
            data_path = Path(var_dir) / "ticketdesk.sqlite3"
        data_path = data_path.resolve()
        data_path.parent.mkdir(parents=True, exist_ok=True)

        def ready(server):
            bound_port = server.server_address[1]
            requiring = f", requiring approval proofs for {proofs.audience}" if proofs else ""
            self.stdout.write(
                f"ticket desk listening on http://{host}:{bound_port} (data {data_path}, {threads} threads{requiring})"
            )
            self.stdout.flush()

        serve(host, port, data_path, threads=threads, on_ready=ready, proofs=proofs)
