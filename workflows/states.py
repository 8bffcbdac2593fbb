"""Every status and every allowed move between them, in one table.

The strings are the public contract (docs/reference/states.md#states). `workflows.engine.transitions.move`
is the only code that changes a status; it consults `check` below.
"""

from django.db import models


class WorkflowStatus(models.TextChoices):
    PLANNED = "PLANNED"
    APPROVED = "APPROVED"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    # Paused before a gate until enough reviewers approve it (docs/explanation/review.md#review).
    WAITING_GATE = "WAITING_GATE"


class StepStatus(models.TextChoices):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    VERIFYING = "VERIFYING"
    COMPLETE = "COMPLETE"
    WAITING_RETRY = "WAITING_RETRY"
    IN_DOUBT = "IN_DOUBT"
    DEAD_LETTERED = "DEAD_LETTERED"
    BLOCKED = "BLOCKED"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    WAITING_GATE = "WAITING_GATE"
    # Its `when` named another choice of its gate (docs/explanation/review.md#typed-decisions): it never runs.
    SKIPPED = "SKIPPED"


class AttemptStatus(models.TextChoices):
    REQUESTED = "REQUESTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    RECONCILED = "RECONCILED"


class FailureClass(models.TextChoices):
    TRANSIENT = "TRANSIENT"
    RATE_LIMITED = "RATE_LIMITED"
    DEPENDENCY_UNAVAILABLE = "DEPENDENCY_UNAVAILABLE"
    TIMEOUT = "TIMEOUT"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    POLICY_FAILED = "POLICY_FAILED"
    CONFLICT = "CONFLICT"
    UNKNOWN = "UNKNOWN"


class PreviewState(models.TextChoices):
    """Where a step's effect preview stands (docs/explanation/actions.md#actions)."""

    # The action offers no preview.
    NONE = "NONE"
    # A worker has yet to take it.
    PENDING = "PENDING"
    READY = "READY"
    FAILED = "FAILED"
    # The args take values from earlier steps (`$from`): nothing to look at before the step runs.
    NOT_AVAILABLE = "NOT_AVAILABLE"


class CompensationStatus(models.TextChoices):
    REQUESTED = "REQUESTED"
    AUTHORIZED = "AUTHORIZED"
    DECLINED = "DECLINED"
    RUNNING = "RUNNING"
    COMPENSATED = "COMPENSATED"
    FAILED = "FAILED"


class PolicyChangeStatus(models.TextChoices):
    PENDING = "PENDING"
    APPLIED = "APPLIED"
    DECLINED = "DECLINED"


class GrantStatus(models.TextChoices):
    """A standing grant (docs/explanation/policies.md#standing-grants)."""

    # On a destructive or irreversible action: awaiting a second reviewer.
    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    # Every use taken: it approves nothing more, yet still backs the steps
    # it approved (their recheck finds it live until it is revoked or expires).
    EXHAUSTED = "EXHAUSTED"
    REVOKED = "REVOKED"
    EXPIRED = "EXPIRED"


W, S, A, C = WorkflowStatus, StepStatus, AttemptStatus, CompensationStatus
P, G = PolicyChangeStatus, GrantStatus

_WITH_EFFECTS = (W.RUNNING, W.COMPLETE, W.FAILED, W.NEEDS_ATTENTION)

TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "workflow": {
        W.PLANNED: frozenset({W.APPROVED, W.REJECTED, W.EXPIRED, W.CANCELLED}),
        # An operator may cancel a plan at any point of its run; its steps
        # stop where they stand (an effect in flight is still recorded).
        W.APPROVED: frozenset({W.RUNNING, W.CANCELLED}),
        W.RUNNING: frozenset({W.COMPLETE, W.FAILED, W.NEEDS_ATTENTION, W.COMPENSATING, W.CANCELLED, W.WAITING_GATE}),
        # Paused at a gate: on with its approvals, ended by a rejection or the
        # deadline, or stopped by an operator.
        W.WAITING_GATE: frozenset({W.RUNNING, W.REJECTED, W.EXPIRED, W.CANCELLED}),
        W.FAILED: frozenset({W.RUNNING, W.COMPENSATING, W.CANCELLED}),
        W.NEEDS_ATTENTION: frozenset({W.RUNNING, W.FAILED, W.COMPENSATING, W.CANCELLED}),
        W.COMPLETE: frozenset({W.COMPENSATING}),
        W.COMPENSATING: frozenset({W.COMPENSATED, W.COMPENSATION_FAILED}),
        W.COMPENSATION_FAILED: frozenset({W.COMPENSATING}),
        # Terminal for the plan, yet the effects it completed before it
        # stopped can still be undone.
        W.REJECTED: frozenset({W.COMPENSATING}),
        # A plan that expired at a gate may have completed steps to undo.
        W.EXPIRED: frozenset({W.COMPENSATING}),
        W.CANCELLED: frozenset({W.COMPENSATING}),
        W.COMPENSATED: frozenset(),
    },
    "step": {
        # SKIPPED: its gate's choice took another branch (terminal).
        S.PENDING: frozenset({S.RUNNING, S.BLOCKED, S.WAITING_GATE, S.SKIPPED}),
        # Approved: back in line to run; rejected, expired or cancelled: it never runs.
        S.WAITING_GATE: frozenset({S.PENDING}),
        S.RUNNING: frozenset({S.VERIFYING, S.WAITING_RETRY, S.IN_DOUBT, S.DEAD_LETTERED, S.BLOCKED}),
        S.WAITING_RETRY: frozenset({S.RUNNING, S.BLOCKED}),
        S.VERIFYING: frozenset({S.COMPLETE, S.IN_DOUBT, S.DEAD_LETTERED}),
        # Replay and operator resolution put a parked step back in line; a
        # reconciliation that finds the effect happened records its outcome.
        S.DEAD_LETTERED: frozenset({S.PENDING, S.VERIFYING}),
        S.BLOCKED: frozenset({S.PENDING}),
        S.IN_DOUBT: frozenset({S.PENDING, S.VERIFYING, S.DEAD_LETTERED}),
        S.COMPLETE: frozenset({S.COMPENSATING}),
        S.COMPENSATING: frozenset({S.COMPENSATED, S.COMPLETE}),
        S.COMPENSATED: frozenset(),
        S.SKIPPED: frozenset(),
    },
    "attempt": {
        A.REQUESTED: frozenset({A.SUCCEEDED, A.FAILED, A.UNKNOWN, A.RECONCILED}),
        A.UNKNOWN: frozenset({A.RECONCILED}),
        A.SUCCEEDED: frozenset(),
        A.FAILED: frozenset(),
        A.RECONCILED: frozenset(),
    },
    "compensation": {
        C.REQUESTED: frozenset({C.AUTHORIZED, C.DECLINED}),
        C.AUTHORIZED: frozenset({C.RUNNING}),
        C.RUNNING: frozenset({C.COMPENSATED, C.FAILED}),
        C.FAILED: frozenset({C.RUNNING}),
        C.DECLINED: frozenset(),
        C.COMPENSATED: frozenset(),
    },
    "policy_change": {
        P.PENDING: frozenset({P.APPLIED, P.DECLINED}),
        P.APPLIED: frozenset(),
        P.DECLINED: frozenset(),
    },
    "grant": {
        G.PENDING: frozenset({G.ACTIVE, G.REVOKED, G.EXPIRED}),
        G.ACTIVE: frozenset({G.EXHAUSTED, G.REVOKED, G.EXPIRED}),
        G.EXHAUSTED: frozenset({G.REVOKED, G.EXPIRED}),
        G.REVOKED: frozenset(),
        G.EXPIRED: frozenset(),
    },
}

# Listed, not derived from "no outgoing edge": a cancelled or rejected plan
# is over even though its completed steps may still be compensated.
TERMINAL_WORKFLOW = frozenset({W.COMPLETE, W.REJECTED, W.EXPIRED, W.CANCELLED, W.COMPENSATED})
ACTIVE_WORKFLOW = frozenset({W.APPROVED, W.RUNNING})
# What a waiter for the end of a workflow waits for (docs/explanation/agents.md#waiting): the end
# states, and the states that need a person, so that a waiter is never stuck.
SETTLED_WORKFLOW = frozenset(
    {
        W.COMPLETE,
        W.REJECTED,
        W.EXPIRED,
        W.CANCELLED,
        W.FAILED,
        W.NEEDS_ATTENTION,
        W.COMPENSATED,
        W.COMPENSATION_FAILED,
        W.WAITING_GATE,
    }
)
# A forward step that is done with: the steps after it may run, and a plan
# whose steps all are is complete.
FINISHED_STEP = frozenset({S.COMPLETE, S.SKIPPED})
RETRYABLE_CLASSES = frozenset({FailureClass.TRANSIENT, FailureClass.RATE_LIMITED, FailureClass.DEPENDENCY_UNAVAILABLE})


class IllegalTransition(Exception):
    """A status change that the table does not allow."""

    def __init__(self, kind: str, current: str, target: str):
        super().__init__(f"{kind} cannot move from {current} to {target}")
        self.kind, self.current, self.target = kind, current, target


def allowed(kind: str, current: str, target: str) -> bool:
    return target in TRANSITIONS[kind].get(current, frozenset())


def check(kind: str, current: str, target: str) -> None:
    if not allowed(kind, current, target):
        raise IllegalTransition(kind, current, target)
