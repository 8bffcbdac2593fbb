"""Standing grants (docs/explanation/policies.md#standing-grants).

A reviewer of an agent's team, who is not the agent's owner, grants the
agent approval in advance of the steps of one action that one Cedar
condition holds on, for at most `max_uses` steps, until a time. On a
destructive or irreversible action the grant is PENDING until a second
reviewer of the team, another person, authorizes it. Any reviewer or
operator of the team revokes it; the worker marks it EXPIRED once its time
passed (reads never wait for that: `until` is checked wherever it counts).

Each use is one operation key, counted in the database: a `GrantUse` row
unique per (grant, key), so a step approved twice counts once, and a
conditional update of `uses` that only succeeds below `max_uses`, so two
workers racing for the last use never both take it.

How the rest of the console asks: a submission (`plans.submit`) calls
`take(agent, step, ...)`, which finds a usable grant whose condition holds
on the step and counts a use of it (the grant, or None: a person decides);
the recheck before each step asks `engine.bases` whether the grant behind
an approval still stands, as `is_live` answers for one grant.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F
from django.http import Http404
from django.utils import timezone

from workflows import actions, persons, roles, teams
from workflows.audit import journal
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, WrongState
from workflows.models import GrantUse, StandingGrant
from workflows.operations import tokens
from workflows.policy import conditions
from workflows.policy.evaluation import PlanTooLarge
from workflows.reasons import clean_reason
from workflows.states import GrantStatus

# A grant is for routine work that is tedious to approve one by one, not a
# standing blank cheque: more uses than this, or a time further than this,
# is a policy for the team's policy set.
MAX_USES = 10_000
MAX_DAYS = 90


class GrantInvalid(DomainError):
    code = "invalid"


def needs_second(action: str) -> bool:
    """Whether a grant of this action waits for a second reviewer."""
    found = actions.find(action)
    return found is None or found.destructive or found.irreversible


def get_for_user(user, grant_id) -> StandingGrant:
    """The grant, if `user` sees it (else a 404)."""
    found = (
        StandingGrant.objects.visible_to(user)
        .select_related("agent", "team", "granted_by", "authorized_by", "revoked_by")
        .filter(pk=grant_id)
        .first()
    )
    if found is None:
        raise Http404
    return found


def _of_team(user, grant_or_team_id) -> bool:
    return getattr(grant_or_team_id, "team_id", grant_or_team_id) in teams.team_ids(user)


def _agent(name, fields: dict):
    User = get_user_model()
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > 150:
        fields["agent"] = "Required: the username of the agent."
        return None
    agent = User.objects.filter(**{User.USERNAME_FIELD: name}, is_active=True).first()
    if agent is None or not roles.is_agent(agent):
        fields["agent"] = "No active agent of that name."
        return None
    return agent


def _check_grantor(by, agent, team) -> None:
    if not roles.is_reviewer(by) or not _of_team(by, team.pk):
        raise NotAllowed(f"Only a reviewer of {team.name}, the agent's team, grants it standing approval.")
    if persons.same(by, agent):
        raise NotAllowed("The agent's owner cannot grant it standing approval: another reviewer of the team must.")


def create(by, *, agent: str, action: str, when: str, max_uses, until: datetime | None) -> StandingGrant:
    """Grant `agent` standing approval; ACTIVE, or PENDING a second reviewer
    on a destructive or irreversible action. GrantInvalid names every field
    that is wrong; NotAllowed (403) a grantor who may not grant it."""
    if not roles.is_reviewer(by):
        raise NotAllowed("Only reviewers grant standing approval.")
    fields: dict[str, str] = {}
    found = _agent(agent, fields)
    if found is not None:
        team = tokens.submitting_team(found)
        _check_grantor(by, found, team)
    if not isinstance(action, str) or actions.find(action) is None:
        fields["action"] = "No installed action of that name."
    try:
        conditions.check_condition(when)
    except DomainError as exc:
        fields["when"] = exc.fields["when"] if exc.fields else exc.message
    if isinstance(max_uses, bool) or not isinstance(max_uses, int) or not 1 <= max_uses <= MAX_USES:
        fields["max_uses"] = f"A whole number from 1 to {MAX_USES}."
    _check_until(until, fields)
    if fields:
        raise GrantInvalid(f"The grant is not valid: {', '.join(sorted(fields))}.", fields=fields)
    second = needs_second(action)
    with transaction.atomic():
        grant = StandingGrant.objects.create(
            team=team,
            agent=found,
            action=action,
            condition=when,
            max_uses=max_uses,
            until=until,
            status=GrantStatus.PENDING if second else GrantStatus.ACTIVE,
            needs_second=second,
            granted_by=by,
        )
        journal.append(
            actor=by,
            verb="grant.created",
            obj_type="grant",
            obj_id=grant.pk,
            data={
                "agent": found.get_username(),
                "team": team.name,
                "action": action,
                "when": when,
                "max_uses": max_uses,
                "until": until.isoformat(),
                "status": grant.status,
            },
        )
    return grant


def _check_until(until, fields: dict) -> None:
    now = timezone.now()
    if until is None:
        fields["until"] = "Required: when the grant ends (ISO 8601, with a time zone)."
    elif not isinstance(until, datetime) or until.tzinfo is None:
        fields["until"] = "Give the time zone too (Z or +hh:mm): a time without one is ambiguous."
    elif until <= now:
        fields["until"] = "This time has passed: give when the grant ends, in the future."
    elif until > now + timedelta(days=MAX_DAYS):
        fields["until"] = f"At most {MAX_DAYS} days ahead."


def _locked(grant: StandingGrant) -> StandingGrant:
    return StandingGrant.objects.select_for_update(of=("self",)).select_related("agent", "team").get(pk=grant.pk)


def authorize(grant: StandingGrant, *, by, reason: str = "") -> StandingGrant:
    """The second reviewer's authorization of a PENDING grant: it is ACTIVE."""
    if not roles.is_reviewer(by) or not _of_team(by, grant):
        raise NotAllowed("Only a reviewer of the agent's team authorizes a standing grant.")
    if persons.same(by, grant.granted_by_id):
        raise NotAllowed("A standing grant is authorized by another person than its grantor.")
    if persons.same(by, grant.agent_id):
        raise NotAllowed("The agent's owner cannot authorize its standing grant.")
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        grant = _locked(grant)
        if grant.status != GrantStatus.PENDING:
            raise WrongState(f"The grant is {grant.status}, not awaiting a second reviewer.")
        if grant.until <= timezone.now():
            raise WrongState("The grant's time has passed: grant it again.")
        move(
            grant,
            GrantStatus.ACTIVE,
            actor=by,
            verb="grant.authorized",
            authorized_by=by,
            authorized_at=timezone.now(),
            data={"granted_by": grant.granted_by.get_username(), "reason": reason},
        )
    return grant


def revoke(grant: StandingGrant, *, by, reason: str) -> StandingGrant:
    """End a grant now: it approves nothing more, and the steps it approved
    stop before their next effect (`is_live`)."""
    if not (roles.is_reviewer(by) or roles.is_operator(by)) or not _of_team(by, grant):
        raise NotAllowed("Only a reviewer or operator of the agent's team revokes a standing grant.")
    reason = clean_reason(reason)
    with transaction.atomic():
        grant = _locked(grant)
        if grant.status not in (GrantStatus.PENDING, GrantStatus.ACTIVE, GrantStatus.EXHAUSTED):
            raise WrongState(f"The grant is {grant.status} already.")
        move(
            grant,
            GrantStatus.REVOKED,
            actor=by,
            verb="grant.revoked",
            revoked_by=by,
            revoked_at=timezone.now(),
            revoke_reason=reason,
            data={"reason": reason, "uses": grant.uses},
        )
    return grant


def expire_lapsed(limit: int = 100) -> int:
    """Mark EXPIRED the grants whose time passed, each once (the
    conditional update of `move` decides who does)."""
    expired = 0
    for grant in StandingGrant.objects.lapsed().order_by("until")[:limit]:
        with transaction.atomic():
            expired += move(grant, GrantStatus.EXPIRED, actor="system", verb="grant.expired", data={"uses": grant.uses})
    return expired


class _Refused(Exception):
    """Rolls back a use that could not be counted."""


def use(grant: StandingGrant, operation_key: str, *, workflow_id=None) -> bool:
    """Count one use of `grant` for `operation_key`: True when counted now
    or counted for this key before (and the grant still stands); False when
    the grant has no use left, or is not active, or its time passed."""
    now = timezone.now()
    try:
        with transaction.atomic():
            try:
                with transaction.atomic():
                    GrantUse.objects.create(
                        grant_id=grant.pk, operation_key=operation_key, workflow_id=workflow_id, used_at=now
                    )
            except IntegrityError:
                raise _Refused(StandingGrant.objects.live(now).filter(pk=grant.pk).exists()) from None
            counted = StandingGrant.objects.usable(now).filter(pk=grant.pk).update(uses=F("uses") + 1)
            if not counted:
                raise _Refused(False)
            current = StandingGrant.objects.select_related("granted_by").get(pk=grant.pk)
            data = {
                "operation_key": operation_key,
                "uses": current.uses,
                "max_uses": current.max_uses,
                "granted_by": current.granted_by.get_username(),
            }
            journal.append(
                actor=f"grant:{grant.pk}",
                verb="grant.used",
                obj_type="grant",
                obj_id=grant.pk,
                workflow_id=workflow_id,
                data=data,
            )
            if current.uses == current.max_uses:
                move(current, GrantStatus.EXHAUSTED, actor="system", verb="grant.exhausted", data=data)
            grant.uses, grant.status = current.uses, current.status
    except _Refused as refused:
        return refused.args[0]
    return True


def matching(
    agent, step: dict, *, team: str, now: datetime | None = None, steps_in_plan: int = 1, workflow: str = "plan"
) -> list[StandingGrant]:
    """The usable grants of `agent` (a user) for the step's action in
    `team` whose condition holds on `step` (key, action, args), soonest to
    end first. A grant of an action that became destructive or irreversible
    since it was granted by one reviewer alone matches nothing."""
    now = now or timezone.now()
    candidates = list(
        StandingGrant.objects.usable(now)
        .filter(agent=agent, action=step.get("action"), team__name=team)
        .select_related("granted_by")
        .order_by("until", "created_at")
    )
    if candidates and needs_second(step["action"]):
        candidates = [g for g in candidates if g.authorized_by_id is not None]
    try:
        holds = conditions.holding(
            {str(g.pk): g.condition for g in candidates},
            step,
            agent=agent.get_username(),
            team=team,
            now=now,
            steps_in_plan=steps_in_plan,
            workflow=workflow,
        )
    except PlanTooLarge:
        return []
    return [g for g in candidates if str(g.pk) in holds]


def take(agent, step: dict, *, team: str, operation_key: str, workflow_id=None, steps_in_plan: int = 1):
    """The grant that approves this step, one use of it counted for
    `operation_key`; None when none does (a person decides)."""
    for grant in matching(agent, step, team=team, steps_in_plan=steps_in_plan, workflow=str(workflow_id or "plan")):
        if use(grant, operation_key, workflow_id=workflow_id):
            return grant
    return None


def _grant_id(value) -> uuid.UUID | None:
    text = str(value).removeprefix("grant:")
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def is_live(grant_id, operation_key: str | None = None) -> bool:
    """Whether the grant (its id, or the basis `grant:<id>`) still stands:
    not revoked, its time not passed; with `operation_key`, also that it
    approved that operation."""
    pk = _grant_id(grant_id)
    if pk is None or not StandingGrant.objects.live().filter(pk=pk).exists():
        return False
    return operation_key is None or GrantUse.objects.filter(grant_id=pk, operation_key=operation_key).exists()
