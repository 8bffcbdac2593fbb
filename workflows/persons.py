"""Who is one person, for four-eyes (docs: what an approval guarantees).

A person is an account, or the accounts linked as one (`AccountLink`: an
SSO and a local account of the same human), and an agent's account counts
as the person who owns it (`AgentOwner`). This answers only "are these the
same human?" for decisions: sign-in, roles and teams stay per account.
"""

from __future__ import annotations

from collections.abc import Iterable

from workflows.models import AccountLink, AgentOwner, PlanRevision


def keys_of(user_ids: Iterable[int]) -> dict[int, str]:
    """`{user id: person key}`: two accounts of one person share a key."""
    user_ids = {int(pk) for pk in user_ids if pk is not None}
    if not user_ids:
        return {}
    owners = dict(AgentOwner.objects.filter(agent_id__in=user_ids).values_list("agent_id", "owner_id"))
    answering = {pk: owners.get(pk, pk) for pk in user_ids}
    links = dict(AccountLink.objects.filter(user_id__in=set(answering.values())).values_list("user_id", "person"))
    return {pk: (f"person:{links[who]}" if who in links else f"user:{who}") for pk, who in answering.items()}


def key(user) -> str:
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
        for workflow_id, by_id in (PlanRevision.objects.filter(workflow_id__in=edited, number__gt=1)
                                   .values_list("workflow_id", "by_id")):
            found[workflow_id].add(by_id)
    return found
