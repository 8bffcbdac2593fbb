"""A dead letter made the real way: a plan whose second step comments on a
ticket the desk does not hold, approved and run until it fails."""

from tests.support import deciding as decide
from tests.support.running import run_until
from workflows.models import DeadLetter
from workflows.operations import plans

BAD = {
    "name": "comment on a missing ticket",
    "submission_key": "bad",
    "steps": [
        {"key": "find", "action": "noop", "args": {"ticket": 777777}},
        {
            "key": "note",
            "action": "ticket.comment",
            "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "hi"},
        },
    ],
}


def dead_letter(people, key="bad") -> DeadLetter:
    workflow = plans.submit(people["agent"], {**BAD, "submission_key": key}).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    return DeadLetter.objects.get(workflow=workflow)
