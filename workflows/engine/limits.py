"""Limits per action, cluster-wide, decided at claim time (docs/explanation/concurrency.md#effects-in-flight).

An action's policy may set `max_in_flight` (steps of the action RUNNING at
once, across every worker and host) and `rate_per_second` (a token bucket
holding one second of tokens, at least one). A remote that answers
RATE_LIMITED pauses its action for everyone until its Retry-After. Policy
is versioned; the bucket's level and the pause are runtime state, kept in
`ActionThrottle` so that they change without a new policy version.

A claim asks twice. `held_back` is the cheap first look: the actions that
cannot take a claim now, which the claim leaves out before it takes its
window of ready steps, so a saturated slow action never fills the window
and starves the others. `admit` decides, inside the claim's transaction:
it locks the throttle rows of the limited actions among the candidates (in
name order, so claimers never deadlock), counts in-flight steps again under
that lock and draws tokens. Two claimers of one limited action queue on its
row, and the second counts the first's claims once they are committed: the
row lock decides, never a check followed by a write. On SQLite the claim's
transaction holds the database's write lock, which serialises them the same way.

A limit set, or a pause begun, while a claim is between its first look and
its decision applies from the next claim on, like any claim that committed
just before the change.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone

from workflows.audit import journal
from workflows.engine.leases import WORKER
from workflows.models import ActionPolicy, ActionThrottle, Step
from workflows.states import StepStatus

# The bucket holds this many seconds of tokens (and at least one): a short
# burst after a quiet spell, never more.
BURST_SECONDS = 1.0
# A RATE_LIMITED answer without Retry-After pauses its action this long.
DEFAULT_PAUSE_SECONDS = 1.0
# As `workflows.actions.transport._retry_after` bounds a server's wait: past any deadline.
LONGEST_PAUSE_SECONDS = 366 * 24 * 3600.0


class HeldBack(set):
    """The names of actions that cannot take a claim now. `watched`: every
    action that had a limit or a pause when this was read; `admit` looks
    only at those, and lets the others pass without a query."""

    watched: frozenset[str] = frozenset()


def capacity(rate: float) -> float:
    return max(1.0, rate * BURST_SECONDS)


def level(throttle: ActionThrottle | None, rate: float, now: datetime) -> float:
    """The bucket's tokens at `now`: its level when last drawn from, refilled
    at `rate` since (a bucket never drawn from is full)."""
    if throttle is None or throttle.refilled_at is None:
        return capacity(rate)
    elapsed = max(0.0, (now - throttle.refilled_at).total_seconds())
    return min(capacity(rate), throttle.tokens + elapsed * rate)


def in_flight(names) -> dict[str, int]:
    """Steps of each of these actions RUNNING now, cluster-wide."""
    names = list(names)
    if not names:
        return {}
    rows = (
        Step.objects.filter(status=StepStatus.RUNNING, action__in=names)
        .order_by()
        .values("action")
        .annotate(n=Count("pk"))
        .values_list("action", "n")
    )
    return {name: 0 for name in names} | dict(rows)


def _watched_policies(now: datetime):
    """Policies with a limit, or whose action is paused: a few rows at most."""
    throttle = ActionThrottle.objects.filter(action=OuterRef("action"))
    return (
        ActionPolicy.objects.annotate(
            paused_until=Subquery(throttle.values("paused_until")[:1]),
            tokens=Subquery(throttle.values("tokens")[:1]),
            refilled_at=Subquery(throttle.values("refilled_at")[:1]),
        )
        .filter(Q(max_in_flight__isnull=False) | Q(rate_per_second__isnull=False) | Q(paused_until__gt=now))
        .values_list("action", "max_in_flight", "rate_per_second", "paused_until", "tokens", "refilled_at")
    )


def held_back(now=None) -> HeldBack:
    """Actions that cannot take a claim right now: at their `max_in_flight`,
    with an empty bucket, or paused. One query when no action is limited or
    paused, two otherwise."""
    now = now or timezone.now()
    held = HeldBack()
    rows = list(_watched_policies(now))
    held.watched = frozenset(row[0] for row in rows)
    counts = in_flight(row[0] for row in rows if row[1] is not None)
    for name, most, rate, paused_until, tokens, refilled_at in rows:
        bucket = None if tokens is None else ActionThrottle(action=name, tokens=tokens, refilled_at=refilled_at)
        if (
            (paused_until and paused_until > now)
            or (most is not None and counts[name] >= most)
            or (rate is not None and level(bucket, rate, now) < 1.0)
        ):
            held.add(name)
    return held


def _locked_throttles(names: list[str]) -> dict[str, ActionThrottle]:
    """The throttle rows of these actions, created when missing, locked in
    name order until the caller's transaction ends."""
    ActionThrottle.objects.bulk_create([ActionThrottle(action=name) for name in names], ignore_conflicts=True)
    rows = ActionThrottle.objects.select_for_update().filter(action__in=names).order_by("action")
    return {throttle.action: throttle for throttle in rows}


def admit(steps: list[Step], held: HeldBack | None = None, now=None) -> list[Step]:
    """The subset of these candidates (their rows locked by the caller's
    claim transaction) that may be claimed now, in their order; the rest
    stay due, untouched. Steps of actions outside `held.watched` pass
    without a query; without `held`, every action is looked up."""
    names = {step.action for step in steps}
    if held is not None:
        names &= held.watched
    if not names:
        return list(steps)
    policies = {p.action: p for p in ActionPolicy.objects.filter(action__in=names)}
    throttles = _locked_throttles(sorted(names))
    # Read once the rows are locked: a claimer that waited for the lock must
    # not refill from a time before the refill of the one it waited for.
    now = now or timezone.now()
    counts = in_flight(name for name, p in policies.items() if p.max_in_flight is not None)
    room: dict[str, float] = {}
    for name in names:
        policy, throttle = policies.get(name), throttles[name]
        if throttle.paused_until and throttle.paused_until > now:
            room[name] = 0
            continue
        room[name] = math.inf
        if policy is not None and policy.max_in_flight is not None:
            room[name] = max(0, policy.max_in_flight - counts[name])
        if policy is not None and policy.rate_per_second is not None:
            throttle.tokens = level(throttle, policy.rate_per_second, now)
            # Clocks of several hosts: the refill time never goes back.
            throttle.refilled_at = max(now, throttle.refilled_at or now)
            room[name] = min(room[name], math.floor(throttle.tokens))
    admitted = []
    for step in steps:
        if step.action not in room:
            admitted.append(step)
        elif room[step.action] >= 1:
            room[step.action] -= 1
            admitted.append(step)
    taken: dict[str, int] = {}
    for step in admitted:
        taken[step.action] = taken.get(step.action, 0) + 1
    drawn = []
    for name, throttle in throttles.items():
        policy = policies.get(name)
        if policy is not None and policy.rate_per_second is not None:
            throttle.tokens -= taken.get(name, 0)
            drawn.append(throttle)
    if drawn:
        ActionThrottle.objects.bulk_update(drawn, ["tokens", "refilled_at"])
    return admitted


def note_rate_limited(action: str, retry_after: float | None, now=None) -> datetime:
    """Inside the transaction that records a RATE_LIMITED failure: pause the
    action for every worker until now + the remote's Retry-After (bounded;
    a small default without one). A pause is only ever extended, and
    audited once when it begins. Returns the pause's end."""
    now = now or timezone.now()
    wait = DEFAULT_PAUSE_SECONDS if retry_after is None or math.isnan(retry_after) else retry_after
    until = now + timedelta(seconds=min(max(0.0, wait), LONGEST_PAUSE_SECONDS))
    throttle = _locked_throttles([action])[action]
    before = throttle.paused_until
    if before is not None and before >= until:
        return before
    ActionThrottle.objects.filter(action=action).update(paused_until=until)
    if before is None or before <= now:
        journal.append(
            actor=WORKER,
            verb="action.paused",
            obj_type="action",
            obj_id=action,
            data={"action": action, "until": until.isoformat(), "retry_after": retry_after},
        )
    return until


def state(action: str, now=None) -> dict:
    """What the console and the API show beside an action's policy: steps in
    flight now, the pause in force (if any) and the bucket's level."""
    now = now or timezone.now()
    throttle = ActionThrottle.objects.filter(action=action).first()
    policy = ActionPolicy.objects.filter(action=action).first()
    paused = throttle.paused_until if throttle and throttle.paused_until and throttle.paused_until > now else None
    rate = policy.rate_per_second if policy else None
    return {
        "in_flight": in_flight([action])[action],
        "paused_until": paused,
        "tokens": None if rate is None else round(level(throttle, rate, now), 3),
    }
