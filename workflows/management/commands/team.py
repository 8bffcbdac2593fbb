from django.core.management.base import BaseCommand, CommandError

from workflows.errors import DomainError
from workflows.models import Team
from workflows.operations import memberships


class Command(BaseCommand):
    help = ("Teams (DESIGN §23): `team add TEAM` creates one; `team member TEAM USER` makes USER a member "
            "(`--remove` takes them out); `team list` shows each team and its members.")

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        add = commands.add_parser("add", help="Create a team.")
        add.add_argument("team")
        member = commands.add_parser("member", help="Add a member to a team (or remove one).")
        member.add_argument("team")
        member.add_argument("username")
        member.add_argument("--remove", action="store_true", help="Take the user out of the team instead.")
        commands.add_parser("list", help="Each team and its members.")

    def handle(self, *args, command, **options):
        try:
            if command == "add":
                team = memberships.create(options["team"], by="manage.py")
                self.stdout.write(f"Created team {team.name}.")
            elif command == "member":
                team, username = options["team"], options["username"]
                if options["remove"]:
                    done = memberships.remove_member(team, username, by="manage.py")
                    self.stdout.write(f"Removed {username} from {team}." if done else f"{username} was not in {team}.")
                else:
                    done = memberships.add_member(team, username, by="manage.py")
                    self.stdout.write(f"Added {username} to {team}." if done else f"{username} is in {team} already.")
            else:
                for team in Team.objects.prefetch_related("members").order_by("name"):
                    names = ", ".join(sorted(user.get_username() for user in team.members.all())) or "(no members)"
                    self.stdout.write(f"{team.name}: {names}")
        except DomainError as exc:
            raise CommandError(exc.message)
