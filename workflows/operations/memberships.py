"""Teams and their members (docs/explanation/teams.md#teams): created and changed from the
command line (`manage.py team`), each change audited on the system stream."""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction

from workflows.audit import journal
from workflows.errors import DomainError
from workflows.models import Team


class TeamInvalid(DomainError):
    code = "invalid"


class UnknownTeam(DomainError):
    code = "not_found"
    status = 404


def find(name: str) -> Team:
    team = Team.objects.filter(name=name).first()
    if team is None:
        raise UnknownTeam(f"No team named {name[:64]!r}: `manage.py team add {name[:64]}` creates it.")
    return team


def create(name: str, *, by) -> Team:
    """A new team; its name is a slug (letters, digits, - and _), at most 64 characters."""
    try:
        validate_slug(name)
    except ValidationError:
        raise TeamInvalid(f"{name[:64]!r} is not a team name: use letters, digits, hyphens and underscores.") from None
    if len(name) > 64:
        raise TeamInvalid("A team name has at most 64 characters.")
    try:
        with transaction.atomic():
            team = Team.objects.create(name=name)
            journal.append(actor=by, verb="team.created", obj_type="team", obj_id=team.pk, data={"team": name})
    except IntegrityError:
        raise TeamInvalid(f"The team {name!r} exists already.") from None
    return team


def _user(username: str):
    user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
    if user is None:
        raise UnknownTeam(f"No user named {username[:150]!r}.")
    return user


def add_member(team_name: str, username: str, *, by) -> bool:
    """Make the user a member of the team; False if they were already."""
    team, user = find(team_name), _user(username)
    with transaction.atomic():
        if team.members.filter(pk=user.pk).exists():
            return False
        team.members.add(user)
        journal.append(
            actor=by,
            verb="team.member_added",
            obj_type="team",
            obj_id=team.pk,
            data={"team": team.name, "user": user.get_username()},
        )
    return True


def remove_member(team_name: str, username: str, *, by) -> bool:
    """Take the user out of the team; False if they were not in it. A person
    left in no team belongs to `default` again."""
    team, user = find(team_name), _user(username)
    with transaction.atomic():
        if not team.members.filter(pk=user.pk).exists():
            return False
        team.members.remove(user)
        journal.append(
            actor=by,
            verb="team.member_removed",
            obj_type="team",
            obj_id=team.pk,
            data={"team": team.name, "user": user.get_username()},
        )
    return True


MAX_RETENTION_DAYS = 36500


def set_retention(team_name: str, days: str, *, by) -> Team:
    """How many days the team's finished plans stay in the tables before
    `manage.py archive` (without --older-than) moves them out; `none`
    keeps them (docs/explanation/operations-at-scale.md#operations-at-scale)."""
    team = find(team_name)
    if days.strip().lower() == "none":
        value = None
    else:
        try:
            value = int(days)
        except ValueError:
            value = -1
        if not 1 <= value <= MAX_RETENTION_DAYS:
            raise TeamInvalid(f"Retention is a number of days from 1 to {MAX_RETENTION_DAYS}, or 'none'.")
    with transaction.atomic():
        Team.objects.filter(pk=team.pk).update(retention_days=value)
        journal.append(
            actor=by,
            verb="team.retention",
            obj_type="team",
            obj_id=team.pk,
            data={"team": team.name, "from": team.retention_days, "to": value},
        )
    team.retention_days = value
    return team
