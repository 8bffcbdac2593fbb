"""Who is one person, for four-eyes (docs/approval-guarantees.md).

A person is an account, or the accounts linked as one (`AccountLink`: an
SSO and a local account of the same human), and an agent's account counts
as the person who owns it (`AgentOwner`). This answers only "are these the
same human?" for decisions: sign-in, roles and teams stay per account.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model

from workflows.models import AccountLink, PlanRevision


def keys_of(user_ids: Iterable[int], *, remember=None) -> dict[int, str]:
    """`{user id: person key}`: two accounts of one person share a key. One
    query, whatever the number of accounts. `remember`: an account object
    among them, which keeps its key for the rest of its request (`key`), as
    it keeps its roles and teams."""
    user_ids = {int(pk) for pk in user_ids if pk is not None}
    if not user_ids:
        return {}
    found = _keys_of(user_ids)
    if remember is not None:
        remember._person_key = found[int(remember.pk)]
    return found


def _keys_of(user_ids: set[int]) -> dict[int, str]:
    rows = (
        get_user_model()
        .objects.filter(pk__in=user_ids)
        .values_list("pk", "agent_owner__owner_id", "agent_owner__owner__account_link__person", "account_link__person")
    )
    found = {}
    for pk, owner, owner_person, own_person in rows:
        person = owner_person if owner is not None else own_person
        found[pk] = f"person:{person}" if person is not None else f"user:{owner if owner is not None else pk}"
    return {pk: found.get(pk, f"user:{pk}") for pk in user_ids}


def key(user) -> str:
    """The person key of an account (or its id): as its request found it
    already, if it did (`keys_of(remember=...)`)."""
    known = getattr(user, "_person_key", None)
    if known is not None:
        return known
    pk = getattr(user, "pk", user)
    return keys_of([pk])[int(pk)]


def same(a, b) -> bool:
    """Whether two accounts (users or user ids) are one person."""
    a, b = getattr(a, "pk", a), getattr(b, "pk", b)
    if a is None or b is None:
        return False
    found = keys_of([a, b])
    return found[int(a)] == found[int(b)]


def among(user, others: Iterable) -> bool:
    """Whether `user` is the same person as any of `others` (users or ids)."""
    ids = {getattr(o, "pk", o) for o in others} - {None}
    if not ids:
        return False
    pk = getattr(user, "pk", user)
    found = keys_of(ids | {pk})
    return found[int(pk)] in {found[int(i)] for i in ids}


def accounts_of(user) -> list[int]:
    """The account ids linked with `user` as one person (itself included)."""
    pk = getattr(user, "pk", user)
    person = AccountLink.objects.filter(user_id=pk).values_list("person", flat=True).first()
    if person is None:
        return [pk]
    return sorted(AccountLink.objects.filter(person=person).values_list("user_id", flat=True))


def plan_authors(workflows) -> dict:
    """`{workflow id: {account ids}}`: each plan's authors, who never approve
    it or its gates: its submitter and the editor of every revision (a plan
    never edited is not read for)."""
    found = {w.pk: {w.submitted_by_id} for w in workflows}
    edited = [w.pk for w in workflows if w.revision > 1]
    if edited:
        for workflow_id, by_id in PlanRevision.objects.filter(workflow_id__in=edited, number__gt=1).values_list(
            "workflow_id", "by_id"
        ):
            found[workflow_id].add(by_id)
    return found
