from django.core.management.base import BaseCommand, CommandError

from workflows.errors import DomainError
from workflows.models import Team
from workflows.operations import memberships


class Command(BaseCommand):
    help = (
        "Teams (docs/explanation/teams.md#teams): `team add TEAM` creates one; `team member TEAM USER` makes USER a "
        "member (`--remove` takes them out); `team retention TEAM DAYS|none` sets how long its finished plans stay "
        "before `archive` moves them out; `team list` shows each team, its retention and its members."
    )

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        add = commands.add_parser("add", help="Create a team.")
        add.add_argument("team")
        member = commands.add_parser("member", help="Add a member to a team (or remove one).")
        member.add_argument("team")
        member.add_argument("username")
        member.add_argument("--remove", action="store_true", help="Take the user out of the team instead.")
        retention = commands.add_parser(
            "retention", help="Days the team's finished plans stay before `archive` moves them out ('none': kept)."
        )
        retention.add_argument("team")
        retention.add_argument("days")
        commands.add_parser("list", help="Each team, its retention and its members.")

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
            elif command == "retention":
                team = memberships.set_retention(options["team"], options["days"], by="manage.py")
                kept = f"{team.retention_days} days" if team.retention_days else "kept (no retention)"
                self.stdout.write(f"Finished plans of {team.name}: {kept}.")
            else:
                for team in Team.objects.prefetch_related("members").order_by("name"):
                    names = ", ".join(sorted(user.get_username() for user in team.members.all())) or "(no members)"
                    retention = f" (retention {team.retention_days} days)" if team.retention_days else ""
                    self.stdout.write(f"{team.name}{retention}: {names}")
        except DomainError as exc:
            raise CommandError(exc.message) from exc
