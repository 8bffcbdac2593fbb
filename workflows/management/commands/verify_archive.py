from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from workflows.audit import archived

SHOWN = 20


class Command(BaseCommand):
    help = (
        "Prove an archive complete and unmodified (the manifest's signature, each file's SHA-256 and row count, "
        "every archived audit stream recomputed with the audit keys up to the manifest's heads) and joined to the "
        "live audit chain (its audit.archived events carry the manifest's digest). Exits non-zero naming each "
        "problem."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", metavar="DIR")
        parser.add_argument(
            "--jwks",
            metavar="FILE",
            help="Verify the signatures with the public keys of this JWKS (as served at "
            "/.well-known/jwks.json) instead of the signing key set.",
        )

    def handle(self, *args, directory, jwks=None, **options):
        result = archived.verify(Path(directory), jwks=Path(jwks) if jwks else None)
        statement = result.statement
        if result.ok:
            self.stdout.write(
                f"archive OK: {statement['workflows']} workflows, {result.events} audit events in "
                f"{len(statement['heads'])} streams, manifest {result.digest} signed by "
                f"{statement['kid']}, joined to the live audit chain"
            )
            return
        for problem in result.problems[:SHOWN]:
            self.stderr.write(problem)
        more = f" (the first {SHOWN} shown)" if len(result.problems) > SHOWN else ""
        raise CommandError(f"archive BROKEN: {len(result.problems)} problem(s){more} in {directory}")
