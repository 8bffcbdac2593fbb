from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.errors import DomainError
from workflows.operations import memberships, tokens


class Command(BaseCommand):
    help = ("Issue an API bearer token for a user, for a team (the plans submitted with it are that team's). "
            "The token is printed once; only its hash is stored.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")
        parser.add_argument("--team", default="default", help="The agent's team (default: default).")

    def handle(self, *args, username, name, team, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username!r}.")
        try:
            found = memberships.find(team)
        except DomainError as exc:
            raise CommandError(exc.message)
        self.stdout.write(tokens.issue(user, name=name, team=found))
