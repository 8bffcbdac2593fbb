from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.errors import DomainError
from workflows.operations import sessions


class Command(BaseCommand):
    help = (
        "Let one local account sign in with its password for N hours while local sign-in is off "
        "(LOCAL_LOGIN=0): audited as user.breakglass, and each of its sign-ins as user.signed_in. "
        "--hours 0 ends a grant early."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--hours",
            type=float,
            required=True,
            help=f"How long the account may sign in (0 to {sessions.MAX_BREAKGLASS_HOURS}).",
        )

    def handle(self, *args, username, hours, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        try:
            until = sessions.grant_breakglass(user, hours=hours, by="manage.py")
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        if hours:
            self.stdout.write(
                f"{username} may sign in with a password until {until:%Y-%m-%d %H:%M:%S} UTC (/login/?breakglass=1)."
            )
        else:
            self.stdout.write(f"{username}'s break-glass sign-in has ended.")
