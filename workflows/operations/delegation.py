"""A reviewer away hands their queue over (docs/explanation/review.md#delegation).

While a delegation is in force (open, and its `until` not reached), the
notices, reminders, escalations and assignments that would reach the
delegator reach their delegate instead: it routes attention, and nothing
else. The delegate decides with their own eligibility, and the delegator
may still decide: a delegation is not a lock. A decision the delegate makes
on a plan that was the delegator's (they hold its claim, or they are among
the reviewers its notices go to) names them as `delegated_from` in its
audit event.

One hop: a delegator's work goes to their delegate, never on to the
delegate's own delegate, so no chain can loop; and nobody delegates to
someone who is away themselves. A delegation is over once `until` passes,
whatever the worker does; the worker then closes it (`end_lapsed`),
audited as `delegation.ended` with the reason `expired`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from workflows import persons, roles, teams
from workflows.audit import journal
from workflows.engine import policy
from workflows.errors import DomainError, NotAllowed
from workflows.models import Delegation, Workflow
from workflows.reasons import ReasonInvalid, clean_reason

# How far ahead a delegation may end: an absence longer than a quarter is a
# change of team, not a holiday, and an `until` years away is a typo.
MAX_DAYS = 90


class DelegationInvalid(DomainError):
    code = "invalid"


class NoDelegation(DomainError):
    code = "not_found"
    status = 404


def current(user, now: datetime | None = None) -> Delegation | None:
    """`user`'s delegation in force now, or None."""
    return Delegation.objects.active(now).filter(delegator=user).select_related("delegate").first()


def validate(by, *, to: str, until: datetime | None, note: str | None) -> tuple:
    """(delegate, until, note) to record, or `DelegationInvalid` naming every
    field that is wrong (403 `NotAllowed` for someone who reviews nothing)."""
    if not roles.is_reviewer(by):
        raise NotAllowed("Only reviewers hand their review queue over.")
    fields: dict[str, str] = {}
    delegate = _delegate(by, to or "", fields)
    now = timezone.now()
    if until is None:
        fields["until"] = "Required: when you are back (ISO 8601, with a time zone)."
    elif until.tzinfo is None:
        fields["until"] = "Give the time zone too (Z or +hh:mm): a time without one is ambiguous."
    elif until <= now:
        fields["until"] = "This time has passed: give when you are back, in the future."
    elif until > now + timedelta(days=MAX_DAYS):
        fields["until"] = f"At most {MAX_DAYS} days ahead."
    try:
        if "\x00" in (note or ""):
            raise ReasonInvalid("A note may not contain NUL characters.", fields={"note": "No NUL characters."})
        note = clean_reason(note, required=False)
    except DomainError as exc:  # too long, or holding a credential: the reason validator's words
        fields["note"] = next(iter((exc.fields or {"note": exc.message}).values()))
    if fields:
        raise DelegationInvalid(f"The delegation is not valid: {', '.join(sorted(fields))}.", fields=fields)
    return delegate, until, note


def _delegate(by, to: str, fields: dict):
    if not to or "\x00" in to:
        fields["to"] = "Required: the username of the reviewer who looks after your queue."
        return None
    User = get_user_model()
    delegate = User.objects.filter(**{User.USERNAME_FIELD: to}).first()
    if delegate is None or not delegate.is_active or not roles.is_reviewer(delegate):
        fields["to"] = "Not an active reviewer."
    elif persons.same(delegate, by):
        fields["to"] = "That is you (or another account of yours): name someone else."
    elif not teams.team_ids(by) & teams.team_ids(delegate):
        fields["to"] = "Not a reviewer of any of your teams."
    elif (away := current(delegate)) is not None:
        fields["to"] = f"{to} is away themselves until {away.until:%Y-%m-%d %H:%M} UTC: name someone who is here."
    return delegate


def start(by, *, to: str, until: datetime | None, note: str | None = "") -> Delegation:
    """`by` is away until `until`; `to` looks after their queue. Replaces
    (ends, audited) the delegation `by` had."""
    delegate, until, note = validate(by, to=to, until=until, note=note)
    with transaction.atomic():
        _lock(by)
        _close_open(by, actor=by, reason="replaced")
        delegation = Delegation.objects.create(delegator=by, delegate=delegate, until=until, note=note)
        journal.append(
            actor=by,
            verb="delegation.started",
            obj_type="user",
            obj_id=by.pk,
            data={"to": delegate.get_username(), "until": until.isoformat(), "note": note},
        )
    return delegation


def end(by) -> Delegation:
    """`by` is back: their delegation in force ends now (`NoDelegation`
    when none is)."""
    with transaction.atomic():
        _lock(by)
        ended = _close_open(by, actor=by, reason="ended")
    if ended is None:
        raise NoDelegation("You have no delegation in force: there is nothing to end.")
    return ended


def end_lapsed(limit: int = 100) -> int:
    """Close the delegations whose `until` passed, each once (a conditional
    update decides who closes it), audited as ended by the system."""
    closed = 0
    for delegation in Delegation.objects.lapsed().select_related("delegator", "delegate").order_by("until")[:limit]:
        with transaction.atomic():
            closed += _close(delegation, actor="system", reason="expired")
    return closed


def _lock(user) -> None:
    """Starts and ends of one delegator's delegations, one at a time."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()


def _close_open(by, *, actor, reason: str) -> Delegation | None:
    """Inside the caller's transaction: end `by`'s open delegation, if any;
    one already lapsed is closed as expired. The one in force, or None."""
    delegation = Delegation.objects.open().filter(delegator=by).select_related("delegate").first()
    if delegation is None:
        return None
    if delegation.until <= timezone.now():
        _close(delegation, actor="system", reason="expired")
        return None
    return delegation if _close(delegation, actor=actor, reason=reason) else None


def _close(delegation: Delegation, *, actor, reason: str) -> int:
    now = timezone.now()
    ended_at = min(now, delegation.until)
    if not Delegation.objects.filter(pk=delegation.pk, ended_at__isnull=True).update(ended_at=ended_at):
        return 0  # closed meanwhile by another
    delegation.ended_at = ended_at
    journal.append(
        actor=actor,
        verb="delegation.ended",
        obj_type="user",
        obj_id=delegation.delegator_id,
        data={
            "to": delegation.delegate.get_username(),
            "until": delegation.until.isoformat(),
            "reason": reason,
        },
    )
    return 1


# --- where the delegation routes attention -------------------------------------


def route(people: list, may_receive: QuerySet) -> tuple[list, dict[str, str]]:
    """`people` (users) with each who is away replaced by their delegate,
    when the delegate is among `may_receive` (else the notice stays with the
    one away: it never goes to someone who cannot act on it or see it). In
    order, each person once; and `{away username: delegate username}` for
    the audit. One hop: a delegate's own delegation is not followed."""
    away = dict(
        Delegation.objects.active()
        .filter(delegator__in=[person.pk for person in people])
        .values_list("delegator_id", "delegate_id")
    )
    if not away:
        return people, {}
    delegates = {user.pk: user for user in may_receive.filter(pk__in=set(away.values()))}
    routed, seen, moved = [], set(), {}
    for person in people:
        receiver = delegates.get(away.get(person.pk), person)
        if receiver.pk != person.pk:
            moved[person.get_username()] = receiver.get_username()
        if receiver.pk not in seen:
            seen.add(receiver.pk)
            routed.append(receiver)
    return routed, moved


def stand_in(user, may_receive: QuerySet):
    """Who gets an assignment meant for `user`: their delegate while they are
    away, if the delegate is among `may_receive`; else `user`."""
    return route([user], may_receive)[0][0]


def on_behalf(workflow: Workflow, by) -> str | None:
    """The username of the away reviewer `by` decides for, on this plan, or
    None: one who delegated to `by` and holds the plan's claim, else the
    first (by start) who is among the plan's reviewers (of its team, a
    reviewer, in its reviewer groups, not its submitter: those its notices
    would have reached)."""
    delegations = list(
        Delegation.objects.active().filter(delegate=by).select_related("delegator").order_by("since", "pk")
    )
    if not delegations:
        return None
    for delegation in delegations:
        if workflow.claimed_by_id == delegation.delegator_id and workflow.claim() is not None:
            return delegation.delegator.get_username()
    reviewers = set(
        get_user_model()
        .objects.filter(
            teams.members_q(workflow.team_id),
            is_active=True,
            groups__name=roles.REVIEWERS,
            pk__in=[d.delegator_id for d in delegations],
        )
        .exclude(pk=workflow.submitted_by_id)
        .values_list("pk", flat=True)
    )
    for delegation in delegations:
        if delegation.delegator_id in reviewers and not policy.outside_reviewer_groups(workflow, delegation.delegator):
            return delegation.delegator.get_username()
    return None


def stamped(data: dict, workflow: Workflow, by) -> dict:
    """A decision's audit data, naming the away reviewer as `delegated_from`
    when `by` decides on their behalf (`on_behalf`)."""
    away = on_behalf(workflow, by)
    return {**data, "delegated_from": away} if away else data
