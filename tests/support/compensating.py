"""What compensation undoes: a plan that opens two tickets and then fails,
and the closes the desk received for each ticket."""

from tests.support import deciding as decide
from tests.support.running import run_until
from workflows.operations import plans


def three_steps(key="inc-1"):
    """Two tickets, then a step that cannot succeed: the main use case."""
    return {
        "name": "Open two tickets, then note on a missing one",
        "submission_key": key,
        "steps": [
            {"key": "first", "action": "ticket.create", "args": {"title": "First", "body": "1"}},
            {"key": "second", "action": "ticket.create", "args": {"title": "Second", "body": "2"}},
            # Its ticket is a result the step before never has: the comment cannot be sent.
            {
                "key": "third",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "second.result.missing"}, "body": "never lands"},
            },
        ],
    }


def failed_workflow(people, body=None):
    workflow = plans.submit(people["agent"], body or three_steps()).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    return workflow


def closes_per_ticket(desk):
    counts = {}
    for entry in desk.ledger():
        if entry["path"].endswith("/close"):
            ticket = entry["path"].split("/")[2]
            counts[ticket] = counts.get(ticket, 0) + 1
    return counts
