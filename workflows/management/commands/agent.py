from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.operations import sessions


class Command(BaseCommand):
    help = (
        "Agents' accounts: `enable NAME` re-enables the tokens stopped when the agent's owner was signed out "
        "or removed at the identity provider (audited as agent.enabled)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        enabling = sub.add_parser("enable", help="Re-enable an agent's suspended tokens.")
        enabling.add_argument("name")

    def handle(self, *args, verb, name, **options):
        agent = get_user_model().objects.filter(username=name, is_active=True).first()
        if agent is None:
            raise CommandError(f"No active user named {name!r}.")
        count = sessions.enable_agent(agent, by="manage.py")
        self.stdout.write(f"{count} token(s) of {name} re-enabled." if count else f"{name} has no suspended token.")
