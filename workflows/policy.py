"""Resume with current policy: an old checkpoint is not a permanent grant.

`recheck` runs before every attempt (first, retry, recovery, replay) and
lists what no longer holds; any problem blocks the step.
"""

from django.utils import timezone

from workflows import actions, roles
from workflows.models import Approval, Step


def recheck(step: Step) -> list[str]:
    workflow = step.workflow
    problems = []
    try:
        actions.get(step.action)
    except KeyError:
        problems.append(f"action {step.action} is no longer available")
    if workflow.deadline <= timezone.now():
        problems.append("the workflow's deadline has passed")
    approvals = Approval.objects.filter(
        workflow=workflow, decision=Approval.Decision.APPROVE, plan_hash=workflow.plan_hash
    ).select_related("reviewer")
    valid = [a for a in approvals if roles.is_reviewer(a.reviewer) and a.reviewer_id != workflow.submitted_by_id]
    if not valid:
        problems.append("no valid approval: the approver is no longer an active reviewer, or the plan changed")
    return problems
