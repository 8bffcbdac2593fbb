"""Queue lanes (docs/explanation/architecture.md#queue-lanes): a real
`qcluster` saturated by a backlog of thousands of due steps against a slow
desk still delivers a reviewer's notice, takes a plan's previews and posts
its Slack message (to the stand-in, tests/support/slack.py) at once, on
the messages lane; previews whose wake-up was lost are taken there all
the same (they are due rows, which the worker loop's sweep wakes the
messages lane for).

Nothing here is timed: each delivery records how many of the backlog's
steps were still unfinished at the moment it arrived."""

import threading
import time
from collections import Counter

import pytest
from django.db import connection, transaction
from django_q.models import OrmQ

from tests.support.plans import ticket_plan
from tests.support.previewing import wait_for_previews
from tests.support.receiver import Receiver
from tests.support.slack import fresh_slack, standin_session
from workflows import queue
from workflows.engine import previews
from workflows.models import Step, Workflow
from workflows.operations import approvals, plans
from workflows.operations.deciding import Seen
from workflows.states import StepStatus

pytestmark = pytest.mark.live

PLANS, STEPS_PER_PLAN = 200, 10  # 2,000 due steps
BACKLOG = PLANS * STEPS_PER_PLAN
# One step worker with few effects in flight against a desk that answers
# slowly: the backlog takes minutes, every drain spends its whole budget
# (Q_TIMEOUT 12 s: about 7 s of claiming) and the step lane is saturated.
WORKER = {
    "Q_WORKERS": "1",
    "Q_MESSAGE_WORKERS": "1",
    "WORKER_CONCURRENCY": "4",
    "Q_TIMEOUT": "12",
    "Q_RETRY": "24",
    "ACTION_TIMEOUT_SECONDS": "5",
}
DESK_LATENCY_MS = 200


@pytest.fixture(scope="module")
def slack_standin(tmp_path_factory):
    yield from standin_session(tmp_path_factory)


@pytest.fixture
def slack(slack_standin, settings):
    return fresh_slack(slack_standin, settings)


@pytest.fixture
def backlog(people, desk):
    """Approved plans of `ticket.create` steps, due before any worker runs;
    the notices and previews of their own submission are already done
    (their queued tasks removed), so that the lanes hold only the drains
    the worker loop asks for."""
    ids = []
    for first in range(0, PLANS, 50):
        with transaction.atomic():
            for n in range(first, first + 50):
                steps = [
                    {"key": f"s{k}", "action": "ticket.create", "args": {"title": f"backlog {n}.{k}"}}
                    for k in range(STEPS_PER_PLAN)
                ]
                body = {"name": f"backlog {n}", "submission_key": f"backlog-{n}", "steps": steps}
                workflow = plans.submit(people["agent"], body).workflow
                previews.compute(workflow.pk)
                approvals.approve(workflow, by=people["reviewer"], seen=Seen.current(workflow))
                ids.append(workflow.pk)
    OrmQ.objects.all().delete()
    desk.fault(mode="latency", ms=DESK_LATENCY_MS)
    yield ids
    desk.clear_faults()


def unfinished(ids) -> int:
    return Step.objects.filter(workflow_id__in=ids).exclude(status=StepStatus.COMPLETE).count()


class Deliveries:
    """Notices (REVIEW_WEBHOOK_URL) as they arrive, each with the backlog's
    unfinished steps counted in the receiver's thread on arrival."""

    def __init__(self, backlog):
        self.backlog = backlog
        self.unfinished_at: dict[str, int] = {}
        self.order: list[str] = []
        self.lock = threading.Lock()
        self.receiver = Receiver(on_arrival=self.arrived)

    def arrived(self, body: dict) -> None:
        try:
            left = unfinished(self.backlog)
        finally:
            connection.close()  # the server thread's own connection
        with self.lock:
            self.unfinished_at.setdefault(body["workflow_id"], left)
            self.order.append(body["workflow_id"])

    def __enter__(self):
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc):
        self.receiver.__exit__(*exc)

    def wait(self, workflow_id: str, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while workflow_id not in self.unfinished_at:
            assert time.monotonic() < deadline, f"no notice for {workflow_id} within {timeout} s"
            time.sleep(0.05)
        return self.unfinished_at[workflow_id]


def saturated(backlog, worker, completed: int = 20) -> int:
    """Until the step lane is under way (`completed` backlog steps done);
    the backlog's unfinished steps then."""
    deadline = time.monotonic() + 120
    while (left := unfinished(backlog)) > BACKLOG - completed:
        assert worker.alive, worker.log()[-3000:]
        assert time.monotonic() < deadline, "the backlog did not start"
        time.sleep(0.1)
    return left


def submit(people, key: str):
    return plans.submit(people["agent"], ticket_plan(key)).workflow


def test_a_notice_previews_and_a_slack_message_go_out_at_once_while_a_backlog_of_steps_saturates_the_step_lane(
    people, backlog, slack, start_worker
):
    # `slack` after `backlog`: the backlog's own plans were submitted with no Slack, so have no messages.
    with Deliveries(backlog) as deliveries:
        worker = start_worker(REVIEW_WEBHOOK_URL=deliveries.receiver.url, **WORKER, **slack.env)
        saturated(backlog, worker)

        workflow = submit(people, "behind-the-backlog")  # queues its notice, its previews and its message
        at_notice = deliveries.wait(str(workflow.pk))
        at_previews = previews_taken(workflow, backlog)
        slack.wait_for(lambda calls: any(str(workflow.pk) in str(call) for call in calls), timeout=120)
        at_message = unfinished(backlog)  # counted after the post: at most what was unfinished at it

    assert at_notice > BACKLOG // 2, f"the notice came only once the backlog was nearly drained ({at_notice} left)"
    assert at_previews > BACKLOG // 2, f"the previews came only once the backlog was nearly drained ({at_previews})"
    assert at_message > BACKLOG // 2, f"the Slack message came only once the backlog was nearly drained ({at_message})"
    assert unfinished(backlog) > BACKLOG // 2  # and the backlog is still far from drained after both


def test_previews_whose_wake_up_was_lost_are_taken_on_the_messages_lane_all_the_same(people, backlog, start_worker):
    """A plan's previews are due rows (`Workflow.previews_due_at`), as its
    notice is: its wake-up lost (Redis keeps none across a restart) or
    queued where no worker looks, the worker loop's sweep wakes the
    messages lane, which takes them while the backlog still saturates the
    step lane."""
    worker = start_worker(**WORKER)
    saturated(backlog, worker)

    with transaction.atomic():
        workflow = submit(people, "wake-up-lost")
        assert preview_wake_ups() == {queue.lane_key(queue.MESSAGES): 1}
        OrmQ.objects.filter(key=queue.lane_key(queue.MESSAGES)).delete()
    assert Workflow.objects.get(pk=workflow.pk).previews_due_at is not None

    at_previews = previews_taken(workflow, backlog)
    assert at_previews > BACKLOG // 2, f"the previews waited for the backlog ({at_previews} steps left)"
    assert Workflow.objects.get(pk=workflow.pk).previews_due_at is None


def previews_taken(workflow, backlog) -> int:
    """Until every step of `workflow` has its preview; the backlog's unfinished steps then."""
    wait_for_previews(workflow.pk, timeout=120)
    return unfinished(backlog)


def preview_wake_ups() -> dict[str, int]:
    """The previews' wake-ups queued, by queue (django-q2 list key)."""
    return dict(Counter(row.key for row in OrmQ.objects.all() if row.task["func"] == previews.TASK))
