"""Bulk replay from the shell: preview by default, run only with --yes."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.ages import parse_age
from workflows.errors import DomainError
from workflows.operations import deadletters


class Command(BaseCommand):
    help = (
        "Replay open dead letters chosen by id or by filter, with their original operation keys. "
        "Shows the preview; replays only with --yes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--id", action="append", dest="ids", default=[], help="A dead letter id (repeatable).")
        parser.add_argument("--action")
        parser.add_argument("--failure-class")
        parser.add_argument("--workflow")
        parser.add_argument("--older-than", help="e.g. 30m, 2h, 1d")
        parser.add_argument("--reason", help="Why (required with --yes).")
        parser.add_argument("--as", dest="username", help="The operator replaying (required with --yes).")
        parser.add_argument("--yes", action="store_true", help="Replay; without it only the preview is shown.")

    def handle(self, *args, ids, action, failure_class, workflow, older_than, reason, username, yes, **options):
        # With --as, only the dead letters of that operator's teams.
        user = get_user_model().objects.filter(username=username, is_active=True).first() if username else None
        if username and user is None:
            raise CommandError("--as must name an active operator.")
        try:
            entries = list(
                deadletters.select(
                    user,
                    ids=ids,
                    action=action,
                    failure_class=failure_class,
                    workflow=workflow,
                    older_than=parse_age(older_than) if older_than is not None else None,
                )
            )
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if not entries:
            self.stdout.write("No open dead letters match.")
            return
        for item in deadletters.preview(entries):
            status = "will run" if item.will_run else "REFUSED"
            self.stdout.write(
                f"{item.dead_letter.pk}  {item.step.key}  {item.step.action}  "
                f"operation_key={item.step.operation_key}  [{status}]"
            )
            for check in item.checks:
                self.stdout.write(f"    {'ok ' if check.ok else 'NO '} {check.name}: {check.detail}")
        if not yes:
            self.stdout.write(f"Preview only: {len(entries)} dead letter(s). Add --yes --reason ... --as USER.")
            return
        if user is None:
            raise CommandError("--as must name an active operator.")
        try:
            done, refused = deadletters.replay_many(entries, by=user, reason=reason or "")
        except DomainError as exc:
            raise CommandError(exc.message) from None
        for entry, why in refused:
            self.stderr.write(f"refused {entry.pk}: {why}")
        self.stdout.write(f"Replayed {len(done)}, refused {len(refused)}.")
