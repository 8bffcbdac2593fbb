"""A step that failed for good without a desk: what makes a dead letter."""

from workflows import actions
from workflows.actions import ActionError
from workflows.engine import execution, outcomes
from workflows.models import DeadLetter


def fail_next_step(workflow_id, message: str = "400") -> DeadLetter:
    """Claim the workflow's next step, request its attempt and record a
    permanent failure (INVALID_ARGUMENTS) as the worker would: its dead letter."""
    step = execution.claim(workflow_id)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(
        step, attempt, actions.get(step.action), ActionError("INVALID_ARGUMENTS", message), step.fence
    )
    return DeadLetter.objects.get(step=step)
