"""Steps left IN_DOUBT for a person to answer: an email (no lookup) whose
worker died after its REQUESTED checkpoint, and what the operator saw."""

from datetime import timedelta

from django.utils import timezone

from tests.support import deciding as decide
from workflows.engine import execution, recovery
from workflows.models import Step
from workflows.operations import plans

MAIL = {
    "name": "notify",
    "submission_key": "mail",
    "steps": [
        {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}},
        {"key": "after", "action": "noop", "args": {}},
    ],
}


# The mail's result is what the next step is told: it reads it by $from.
READ_BY_NEXT = {
    "name": "notify, then record",
    "steps": [
        {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}},
        {"key": "record", "action": "noop", "args": {"subject": {"$from": "mail.result.subject"}}},
    ],
}
READ_BY_NONE = {
    "name": "notify, then something else",
    "steps": [
        {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": "b"}},
        {"key": "after", "action": "noop", "args": {"note": "unrelated"}},
    ],
}
SAW = {
    "decision": "happened",
    "external_ref": "smtp:250-ab12",
    "result": {"subject": "s (seen in the relay)"},
    "reason": "in the mail log",
}


def in_doubt(people, body, key="doubt") -> Step:
    """The plan's first step, an email whose worker died after the REQUESTED
    checkpoint: email has no lookup, so the step waits for a person."""
    workflow = plans.submit(people["agent"], {**body, "submission_key": key}).workflow
    decide.approve(workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    execution._request_attempt(step, step.fence)
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    execution.run_workflow(workflow.pk)
    step.refresh_from_db()
    workflow.refresh_from_db()
    assert (step.status, workflow.status) == ("IN_DOUBT", "NEEDS_ATTENTION")
    return step
