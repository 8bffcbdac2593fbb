"""Grouping accounts as one person, and naming an agent's owner, for
four-eyes only (`workflows.persons`). Each change is audited on the system
stream; a link never gives sign-in, roles or teams."""

from __future__ import annotations

import uuid

from django.db import transaction

from workflows.audit import journal
from workflows.errors import DomainError
from workflows.models import AccountLink, AgentOwner

VIA = ("manual", "sso-email")


class PersonInvalid(DomainError):
    code = "invalid"


def link(a, b, *, by, via: str = "manual") -> str:
    """Make accounts `a` and `b` one person (joining the people they already
    belong to); the person's id. Linking an account with itself is refused."""
    if via not in VIA:
        raise ValueError(via)
    if a.pk == b.pk:
        raise PersonInvalid("An account is one person with itself already: name two accounts.")
    if AgentOwner.objects.filter(agent_id__in=[a.pk, b.pk]).exists():
        raise PersonInvalid(
            "An agent's account is not linked as a person: it counts as its owner's already "
            "(`issue_token NAME --owner USER`)."
        )
    with transaction.atomic():
        rows = {row.user_id: row for row in AccountLink.objects.select_for_update().filter(user_id__in=[a.pk, b.pk])}
        people = {row.person for row in rows.values()}
        person = min(people) if people else uuid.uuid4()
        if len(people) > 1:  # two groups become one
            AccountLink.objects.filter(person__in=people).update(person=person)
        for user in (a, b):
            if user.pk not in rows:
                AccountLink.objects.create(user=user, person=person, via=via)
        journal.append(
            actor=by,
            verb="person.linked",
            obj_type="person",
            obj_id=person,
            data={"accounts": sorted([a.get_username(), b.get_username()]), "via": via},
        )
    return str(person)


def set_owner(agent, owner, *, by) -> bool:
    """Name the person who answers for an agent's account; False if it was
    already theirs. An owner must be a person's account, not another agent."""
    if agent.pk == owner.pk:
        raise PersonInvalid("An agent cannot own itself: name the person who answers for it.")
    if AgentOwner.objects.filter(agent_id=owner.pk).exists():
        raise PersonInvalid(f"{owner.get_username()} is an agent's account: an owner is a person.")
    if AccountLink.objects.filter(user_id=agent.pk).exists():
        raise PersonInvalid(f"{agent.get_username()} is linked as a person's account: it cannot be an agent.")
    with transaction.atomic():
        row = AgentOwner.objects.select_for_update().filter(agent_id=agent.pk).first()
        if row is not None and row.owner_id == owner.pk:
            return False
        before = row.owner.get_username() if row is not None else None
        AgentOwner.objects.update_or_create(agent=agent, defaults={"owner": owner})
        journal.append(
            actor=by,
            verb="agent.owner_set",
            obj_type="user",
            obj_id=agent.pk,
            data={"agent": agent.get_username(), "owner": owner.get_username(), "before": before},
        )
    return True
