"""Many remote effects in flight at once, held by the real desk's latency
fault: approved plans that each send one, and waits on the database and the
desk for them."""

import time
from collections import Counter

from tests.support import deciding as decide
from workflows.models import Attempt, Step, Workflow
from workflows.operations import plans
from workflows.states import AttemptStatus, WorkflowStatus

# Effects slower than any lease, so that they are in flight long enough to
# be counted and killed; the leases live on by the heartbeat. A lookup's
# "not found" counts once a request can no longer land: ACTION_TIMEOUT +
# grace after it was sent.
SLOW = {
    "STEP_LEASE_SECONDS": "3",
    "ACTION_TIMEOUT_SECONDS": "6",
    "RECONCILE_GRACE_SECONDS": "0.5",
    "RETRY_BASE_SECONDS": "0.05",
    "RETRY_CAP_SECONDS": "0.2",
}


def approved_creates(people, count: int, prefix: str, action: str = "ticket.create", args=None) -> list:
    workflows = []
    for n in range(count):
        body = {
            "name": f"{prefix} {n}",
            "submission_key": f"{prefix}-{n}",
            "steps": [{"key": "open", "action": action, "args": args or {"title": f"{prefix} {n}", "body": "x"}}],
        }
        workflows.append(decide.approve(plans.submit(people["agent"], body).workflow, by=people["reviewer"]))
    return workflows


def open_attempts(workflows):
    return Attempt.objects.filter(step__workflow__in=workflows, status=AttemptStatus.REQUESTED)


def wait_until(condition, timeout: float, explain):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, explain()
        time.sleep(0.05)


def wait_for_in_flight(workflows, count: int, timeout: float = 60.0, cluster=None) -> list:
    """Until `count` attempts are REQUESTED at once (committed, their effect
    sent, no outcome yet): the effects in flight, seen from the database."""
    wait_until(
        lambda: open_attempts(workflows).count() >= count,
        timeout,
        lambda: (
            f"{open_attempts(workflows).count()} in flight, wanted {count}\n"
            + (cluster.log()[-3000:] if cluster else "")
        ),
    )
    return list(open_attempts(workflows))


def wait_for_desk_holding(desk, count: int, kind: str = "POST /tickets", timeout: float = 30.0) -> None:
    """Until the desk holds `count` such requests inside its latency fault:
    sent, received, not yet answered."""
    held = lambda: desk.concurrency()["in_flight"].get(kind, 0)  # noqa: E731
    wait_until(lambda: held() >= count, timeout, lambda: f"the desk holds {held()} of {count}")


def wait_complete(workflows, timeout: float = 90.0):
    pks = [w.pk for w in workflows]
    wait_until(
        lambda: not Workflow.objects.filter(pk__in=pks).exclude(status=WorkflowStatus.COMPLETE).exists(),
        timeout,
        lambda: Counter(Workflow.objects.filter(pk__in=pks).values_list("status", flat=True)),
    )


def assert_one_ticket_per_key(workflows, desk):
    keys = list(Step.objects.filter(workflow__in=workflows).values_list("operation_key", flat=True))
    created = Counter(ticket["idempotency_key"] for ticket in desk.tickets())
    wrong = {key: created[key] for key in keys if created[key] != 1}
    assert not wrong, f"one ticket per operation key; tickets by key where not one: {wrong}"
