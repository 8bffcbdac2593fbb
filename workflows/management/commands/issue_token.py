from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.errors import DomainError
from workflows.operations import memberships, persons, tokens


class Command(BaseCommand):
    help = (
        "Issue an API bearer token for a user, for a team (the plans submitted with it are that team's). "
        "The token is printed once; only its hash is stored."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")
        parser.add_argument("--team", default="default", help="The agent's team (default: default).")
        parser.add_argument(
            "--owner",
            default=None,
            help="The person who answers for this agent: its plans count as theirs for four-eyes "
            "(they may not approve them), and their removal at the provider stops its tokens.",
        )

    def handle(self, *args, username, name, team, owner, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username!r}.")
        try:
            found = memberships.find(team)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        if owner is not None:
            person = get_user_model().objects.filter(username=owner, is_active=True).first()
            if person is None:
                raise CommandError(f"No active user named {owner!r} to own the agent.")
            try:
                persons.set_owner(user, person, by=None)
            except DomainError as exc:
                raise CommandError(exc.message) from exc
        self.stdout.write(tokens.issue(user, name=name, team=found))
