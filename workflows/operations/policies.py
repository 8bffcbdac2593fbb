"""Changing an action's policy (docs/explanation/concurrency.md#effects-in-flight): one operator may tighten it
alone; loosening it takes a second operator.

Tightening (kill switch on, a lower limit or one where none was, more
approvals, a shorter approval lifetime or one where none was, higher risk,
fewer attempts, a reviewer group where any reviewer could approve) applies at
once as a new policy version. Anything else is a loosening, and so is a change that mixes both: it becomes a pending
`PolicyChange` that another operator authorizes or declines, like a
compensation. The request names the policy version it was made against; if
the policy changed since, authorizing it is refused (409) rather than
applying it over a change its authorizer never saw.

The direction of each change is decided under the policy's row lock, against
the values it replaces, so two operators changing one policy at once are
judged in the order they commit. Every change, request and decision is
audited in its own transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from workflows import actions, roles
from workflows.audit import journal
from workflows.engine import policy as engine_policy
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, WrongState
from workflows.models import ActionPolicy, PolicyChange
from workflows.operations import policy_sets
from workflows.reasons import clean_reason
from workflows.states import PolicyChangeStatus

EDITABLE = engine_policy.EDITABLE
RISKS = [choice for choice, _ in ActionPolicy.Risk.choices]  # lowest first
# Bounds that keep every value inside its column and meaningful.
INTEGERS = {
    "approvals_required": (1, 100, False),
    "approval_ttl_seconds": (1, 2_147_483_647, True),
    "max_attempts": (1, 1000, False),
    "max_in_flight": (1, 1_000_000, True),
    "review_deadline_seconds": (1, 2_147_483_647, True),
    "review_reminder_seconds": (1, 2_147_483_647, True),
}
MAX_RATE = 1_000_000.0
# Where a larger value is the tighter one; elsewhere the smaller one is, and
# an empty (unlimited) value is the loosest.
LARGER_IS_TIGHTER = {"approvals_required", "risk", "review_reminder_seconds"}


class PolicyInvalid(DomainError):
    code = "invalid"

    def __init__(self, fields: dict[str, str]):
        super().__init__("The policy change is not valid.")
        self.fields = fields


class UnknownAction(DomainError):
    code = "not_found"
    status = 404


@dataclass
class Result:
    """What a change did: `policy` as it is now; `request` when the change
    loosens and waits for a second operator (None when it applied, or when
    it changed nothing)."""

    policy: ActionPolicy
    request: PolicyChange | None = None
    applied: bool = False


def get(action: str, *, reader) -> ActionPolicy:
    """The policy of an installed action (or of one that has a policy
    already), as `reader` may see it (`ActionPolicy.objects.visible_to`);
    404 for any other name, or for a reader who does not read policies."""
    if actions.find(action) is None and not ActionPolicy.objects.filter(action=action).exists():
        raise UnknownAction(f"No action named {action[:64]!r}.")
    rules = engine_policy.policy_for(action)
    if not ActionPolicy.objects.visible_to(reader).filter(pk=rules.pk).exists():
        raise UnknownAction(f"No action named {action[:64]!r}.")
    return rules


def pending(action: str):
    return (
        PolicyChange.objects.filter(action=action, status=PolicyChangeStatus.PENDING)
        .select_related("requested_by")
        .order_by("created_at")
    )


def clean(changes: dict) -> dict:
    """Each value checked against its field, strictly (no "5" for 5, no
    true for 1); a 400 naming every bad field, changing nothing."""
    errors, cleaned = {}, {}
    for name, value in changes.items():
        if name not in EDITABLE:
            errors[name] = "Not an editable policy field."
        elif name in ("enabled", "chat_decisions"):
            if not isinstance(value, bool):
                errors[name] = "Must be true or false."
        elif name == "risk":
            if value not in RISKS:
                errors[name] = f"Must be one of {', '.join(RISKS)}."
        elif name == "escalation_group":
            if value is not None and (not isinstance(value, str) or not Group.objects.filter(name=value).exists()):
                errors[name] = "The name of an existing group, or null for none."
        elif name == "reviewer_group":
            if value is not None and (
                not isinstance(value, str) or (value and not Group.objects.filter(name=value).exists())
            ):
                errors[name] = 'The name of an existing group, or "" (or null) for any reviewer.'
        elif name == "rate_per_second":
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 < value <= MAX_RATE
            ):
                errors[name] = f"Must be a number above 0 and at most {MAX_RATE:g}, or null for unlimited."
        else:
            low, high, nullable = INTEGERS[name]
            if value is None and nullable:
                pass
            elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                errors[name] = f"Must be a whole number from {low} to {high}" + (
                    ", or null for none." if nullable else "."
                )
        if name not in errors:
            cleaned[name] = float(value) if name == "rate_per_second" and value is not None else value
            if name == "reviewer_group":
                cleaned[name] = value or ""
    if errors:
        raise PolicyInvalid(errors)
    return cleaned


def _rank(name: str, value):
    """A value's strictness: higher is tighter."""
    if name in ("enabled", "chat_decisions"):
        return 0 if value else 1
    if name == "risk":
        return RISKS.index(value)
    if name == "escalation_group":
        return 0 if value is None else 1
    if name == "reviewer_group":
        return 0 if not value else 1
    if name in LARGER_IS_TIGHTER:
        return -math.inf if value is None else value
    return -math.inf if value is None else -value


def loosens(current: ActionPolicy, changes: dict) -> list[str]:
    """The fields among `changes` whose new value is looser than the current one."""
    return sorted(
        name
        for name, value in changes.items()
        if _rank(name, value) < _rank(name, getattr(current, name))
        # Telling another group than the one set is no tightening either.
        or (name == "escalation_group" and getattr(current, name) not in (None, value))
        # Only naming a group where any reviewer could approve tightens:
        # changing or clearing one lets people approve who could not.
        or (name == "reviewer_group" and getattr(current, name) not in ("", value))
    )


def _check_operator(user) -> None:
    if not roles.is_operator(user):
        raise NotAllowed("Only operators can change an action's policy.")


def change(action: str, *, by, reason: str, changes: dict, version: int | None = None) -> Result:
    """Apply a tightening now, or record a loosening for a second operator.
    `version`: the policy version the operator was looking at; if the policy
    changed since, nothing happens (409), so a form never reverts a change
    its sender did not see."""
    _check_operator(by)
    get(action, reader=by)
    changes = clean(changes)
    if not changes:
        raise PolicyInvalid({"body": "Name at least one policy field to change."})
    reason = clean_reason(reason)
    with transaction.atomic():
        current = ActionPolicy.objects.select_for_update().get(action=action)
        if version is not None and version != current.version:
            raise WrongState(
                f"The policy of {action} is at version {current.version} now, not {version}: "
                f"look at it again before changing it."
            )
        changes = {name: value for name, value in changes.items() if getattr(current, name) != value}
        if not changes:
            return Result(current)
        looser = loosens(current, changes)
        if not looser:
            return Result(engine_policy.update(action, by=by, reason=reason, **changes), applied=True)
        request = PolicyChange.objects.create(
            action=action, changes=changes, reason=reason, base_version=current.version, requested_by=by
        )
        journal.append(
            actor=by,
            verb="policy_change.requested",
            obj_type="policy_change",
            obj_id=request.pk,
            data={
                "action": action,
                "changes": changes,
                "loosens": looser,
                "reason": reason,
                "base_version": current.version,
            },
        )
    return Result(current, request)


def _check_decider(request: PolicyChange, user) -> None:
    _check_operator(user)
    if request.requested_by_id == user.pk:
        raise NotAllowed("A policy change cannot be decided by the operator who asked for it.")


def authorize(request: PolicyChange, *, by, reason: str = "") -> PolicyChange:
    """A second operator applies a loosening, as a new policy version, if the
    policy is still at the version the request was made against. (A version
    of a Cedar policy set is decided by `policy_sets.authorize`.)"""
    if request.policy_set_version_id is not None:
        return policy_sets.authorize(request, by=by, reason=reason)
    _check_decider(request, by)
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        request = PolicyChange.objects.select_for_update(of=("self",)).select_related("requested_by").get(pk=request.pk)
        if request.status != PolicyChangeStatus.PENDING:
            raise WrongState(f"The policy change is {request.status}, not awaiting a decision.")
        current = ActionPolicy.objects.select_for_update().get(action=request.action)
        if current.version != request.base_version:
            raise WrongState(
                f"The policy of {request.action} changed since this request (version "
                f"{request.base_version}, now {current.version}): decline it and ask again."
            )
        context = {
            "request": str(request.pk),
            "requested_by": request.requested_by.get_username(),
            "authorized_by": journal.actor_name(by),
        }
        updated = engine_policy.update(
            request.action, by=by, reason=request.reason, context=context, **clean(request.changes)
        )
        move(
            request,
            PolicyChangeStatus.APPLIED,
            actor=by,
            verb="policy_change.authorized",
            decided_by=by,
            decided_at=timezone.now(),
            decision_reason=reason,
            applied_version=updated.version,
            data={**context, "action": request.action, "version": updated.version, "decision_reason": reason},
        )
    return request


def decline(request: PolicyChange, *, by, reason: str) -> PolicyChange:
    if request.policy_set_version_id is not None:
        return policy_sets.decline(request, by=by, reason=reason)
    _check_decider(request, by)
    reason = clean_reason(reason)
    with transaction.atomic():
        request = PolicyChange.objects.select_for_update(of=("self",)).select_related("requested_by").get(pk=request.pk)
        if request.status != PolicyChangeStatus.PENDING:
            raise WrongState(f"The policy change is {request.status}, not awaiting a decision.")
        move(
            request,
            PolicyChangeStatus.DECLINED,
            actor=by,
            verb="policy_change.declined",
            decided_by=by,
            decided_at=timezone.now(),
            decision_reason=reason,
            data={"action": request.action, "requested_by": request.requested_by.get_username(), "reason": reason},
        )
    return request
