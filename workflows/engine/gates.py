"""Gates in the middle of a plan (docs/explanation/review.md#review): the run pauses before a step
that carries `"gate": {"approvals": N, "note"}` until N reviewers approve it,
having seen the results of the steps before it.

The pause is taken by the claim that finds the gated step ready, in its
transaction and under its row lock, so two workers never both pause it and
no attempt is ever requested for a step whose gate is shut. The decisions
are `operations.gates`; this module holds what the engine needs: the pause,
the digest of the results a gate's approvers see, and the count of valid
gate approvals the policy recheck makes before the gated step's attempt.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model

from workflows import persons, roles
from workflows.db import canonical_json, sha256_hex
from workflows.engine import binding
from workflows.models import ActionPolicy, GateApproval, Step, Workflow


def shut(step: Step) -> bool:
    """A forward step whose gate has yet to open."""
    return bool(step.gate) and step.gate_opened_at is None and step.lane == 0


def results_shown(step: Step) -> list[list]:
    """What a gate's approvers see of the run so far: each forward step
    before the gate, in order, with its status and result."""
    return [
        [key, status, result]
        for key, status, result in Step.objects.filter(workflow_id=step.workflow_id, lane=0, position__lt=step.position)
        .order_by("position")
        .values_list("key", "status", "result")
    ]


def results_digest(step: Step) -> str:
    """The digest a gate approval binds: SHA-256 of `results_shown`."""
    return sha256_hex(canonical_json(results_shown(step)))


def valid_approvals(step: Step, workflow: Workflow, digest: str | None = None) -> list[GateApproval]:
    """Approvals of this gate that still count: sealed, for the plan as it
    stands and the results as they stand, by a reviewer who is still active
    and still a reviewer (and in the plan's reviewer groups), none of the
    plan's authors. One per person."""
    digest = digest or results_digest(step)
    approvals = list(GateApproval.objects.filter(step=step, decision=GateApproval.Decision.APPROVE))
    reviewers = (
        set(
            get_user_model()
            .objects.filter(
                pk__in={a.reviewer_id for a in approvals},
                is_active=True,
                groups__name=roles.REVIEWERS,
            )
            .values_list("pk", flat=True)
        )
        if approvals
        else set()
    )
    # Only reviewers still in the reviewer groups the plan's policies name
    # (its actions' and its team's Cedar policies', `policy.asked`).
    groups = (
        set(
            ActionPolicy.objects.filter(action__in={s["action"] for s in workflow.plan})
            .exclude(reviewer_group="")
            .values_list("reviewer_group", flat=True)
        )
        | set((workflow.policy_asks or {}).get("groups") or [])
        if reviewers
        else set()
    )
    reviewers = roles.in_all_groups(reviewers, groups)
    authors = persons.plan_authors([workflow])[workflow.pk] if reviewers else set()
    people = persons.keys_of(reviewers | authors)
    written = {people[pk] for pk in authors}
    counted = {}
    for a in approvals:  # one per person, never an author's
        if (
            a.plan_hash == workflow.plan_hash
            and a.results_digest == digest
            and binding.verifies(a)
            and a.reviewer_id in reviewers
            and people[a.reviewer_id] not in written
        ):
            a.person = people[a.reviewer_id]
            counted.setdefault(a.person, a)
    found = list(counted.values())
    if found and step.gate and ("options" in step.gate or "input_schema" in step.gate):
        # A typed gate's approvals count for the first one's choice and input only
        # (docs/explanation/review.md#typed-decisions).
        first = min(found, key=lambda a: (a.created_at, a.pk))
        found = [
            a for a in found if a.choice == first.choice and canonical_json(a.input) == canonical_json(first.input)
        ]
    return found


def required(step: Step) -> int:
    return int((step.gate or {}).get("approvals", 1))


def standing(approvals: list[GateApproval]) -> dict | None:
    """At a typed gate, the `{"choice", "input"}` of the first of its valid
    approvals, which every other approver approves as it is
    (docs/explanation/review.md#typed-decisions); None before the first."""
    if not approvals:
        return None
    first = min(approvals, key=lambda a: (a.created_at, a.pk))
    return {"choice": first.choice or None, "input": first.input}
