"""The task queue after an outage (workflows.queue.QueueBroker):
plans submitted and approved while no worker ran leave each plan's
reviewers' notice queued ahead of the approvals' wake-ups. The broker takes
wake-ups of due work first, oldest first among them, then every other task
oldest first, through an index in that order, on both databases; the
worker loop's sweep counts only drains already queued, so a queue full of
notices never keeps it from asking for one.

Here every task takes the steps lane, as the tasks queued before lanes
existed do (and bulk jobs' batches): notices stand for any task that shares
a lane with the drains. Lanes themselves: tests/engine/test_queue_lanes.py."""

import time

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import Failure, OrmQ

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from workflows import db, queue
from workflows.engine import execution, previews, worker
from workflows.models import Attempt, Workflow
from workflows.operations import plans
from workflows.queue import QueueBroker
from workflows.states import WorkflowStatus

NOOP = [{"key": "s", "action": "noop", "args": {}}]


def submit(people, key):
    """A plan, and a task of its own queued after it: its notice's task as
    queued before notices were rows, standing for any task with arguments
    that shares the lane with the drains (a bulk job's batch). The
    submission's own wake-up of the notices is taken off the queue: it is
    a wake-up of due work, as drains are, and not this module's subject."""
    workflow = plans.submit(people["agent"], {"name": key, "submission_key": key, "steps": NOOP}).workflow
    OrmQ.objects.filter(
        pk__in=[row.pk for row in OrmQ.objects.all() if row.task["func"] == "workflows.tasks.send_review_notices"]
    ).delete()
    queue.enqueue("workflows.tasks.notify_reviewers", str(workflow.pk), name=f"notify {workflow.pk}")
    return workflow


def taken_names(broker, count):
    names = []
    for _ in range(count):
        (task,) = broker.dequeue()
        names.append(OrmQ.objects.get(pk=task[0]).task["name"])
    return names


@pytest.fixture(autouse=True)
def one_lane(monkeypatch):
    monkeypatch.setattr(queue, "LANES", {})


@pytest.fixture
def broker(db):
    return QueueBroker(list_key=Conf.CLUSTER_NAME)


def test_the_configured_orm_broker_is_the_ordered_one(db, settings):
    if "orm" not in settings.Q_CLUSTER:
        pytest.skip("Redis keeps its own order")
    assert isinstance(get_broker(), QueueBroker)


def test_after_an_outage_wake_ups_of_approved_work_come_out_before_the_notices_queued_ahead(people, broker, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "workers": 4}  # as many kept as approved: none dropped
    workflows = [submit(people, f"outage-{n}") for n in range(4)]
    for workflow in workflows:
        decide.approve(workflow, by=people["reviewer"])
    later = submit(people, "outage-later")  # a notice queued after the wake-ups

    names = taken_names(broker, 9)

    assert names[:4] == [f"run {workflow.pk}" for workflow in workflows]  # the approvals, in their order
    assert names[4:] == [f"notify {workflow.pk}" for workflow in [*workflows, later]]  # then the rest, oldest first
    assert broker.dequeue() is None


def test_under_a_backlog_a_task_that_waited_gets_its_turn_after_each_drain(people, broker, settings):
    """Wake-ups first, except that after a drain a notice that has waited
    FAIR_WAIT goes next: a sustained backlog (a drain always queued) does
    not hold reviewers' notices back until it clears."""
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "workers": 4}  # no wake-up dropped here
    workflows = [submit(people, f"backlog-{n}") for n in range(3)]
    for workflow in workflows[:2]:
        decide.approve(workflow, by=people["reviewer"])
    waited = timezone.now() - queue.FAIR_WAIT * 2
    OrmQ.objects.filter(lock__gt=timezone.now() - queue.HEAD_START / 2).update(lock=waited)

    names = taken_names(broker, 5)

    runs, notices = [f"run {w.pk}" for w in workflows[:2]], [f"notify {w.pk}" for w in workflows]
    assert names == [runs[0], notices[0], runs[1], notices[1], notices[2]]


def test_a_notice_that_has_not_waited_stays_behind_the_drains(people, broker, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "workers": 4}
    first, second = submit(people, "fresh-1"), submit(people, "fresh-2")
    for workflow in (first, second):
        decide.approve(workflow, by=people["reviewer"])
    assert taken_names(broker, 4) == [
        f"run {first.pk}",
        f"run {second.pk}",
        f"notify {first.pk}",
        f"notify {second.pk}",
    ]


def test_taking_a_wake_up_leaves_one_per_worker_queued_and_the_drain_runs_every_approved_step(people, broker):
    """A burst of approvals queues a wake-up each; once one is taken, one
    per worker stays queued, the rest are dropped (each would have found
    its steps already claimed), the notices are untouched, and the drain
    the first one starts runs the steps of every approved plan."""
    workers = settings.Q_CLUSTER["workers"]
    workflows = [decide.approve(submit(people, f"burst-{n}"), by=people["reviewer"]) for n in range(12)]
    assert broker.drains_queued() == 12

    assert taken_names(broker, 1) == [f"run {workflows[0].pk}"]

    assert broker.drains_queued() == workers
    assert taken_names(broker, workers) == [f"run {workflow.pk}" for workflow in workflows[1 : 1 + workers]]
    assert [row.task["name"] for row in OrmQ.objects.order_by("id") if row.task["func"] not in queue.DRAINS] == [
        f"notify {workflow.pk}" for workflow in workflows
    ]
    assert execution.drain(budget_seconds=30) == 12
    for workflow in workflows:
        workflow.refresh_from_db()
        assert workflow.status == WorkflowStatus.COMPLETE


def test_a_drain_queued_after_the_one_taken_is_kept_when_fewer_than_the_workers_wait(people, broker):
    first = decide.approve(submit(people, "alone-1"), by=people["reviewer"])
    assert taken_names(broker, 1) == [f"run {first.pk}"]
    second = decide.approve(submit(people, "alone-2"), by=people["reviewer"])
    assert broker._collapse(timezone.now()) == 0  # nothing beyond one per worker
    assert taken_names(broker, 1) == [f"run {second.pk}"]


def test_taking_a_lone_wake_up_reads_the_queue_once_and_drops_nothing(people, broker):
    """An approval's wake-up with no burst behind it (the notices queued
    after it are no drains): one read and the conditional update that takes
    it, and no statement more before its worker has it."""
    workflow = decide.approve(submit(people, "lone"), by=people["reviewer"])
    with CaptureQueriesContext(connection) as captured:
        (task,) = broker.dequeue()
    assert OrmQ.objects.get(pk=task[0]).task["name"] == f"run {workflow.pk}"
    assert [query["sql"].split()[0] for query in captured] == ["SELECT", "UPDATE"]
    assert taken_names(broker, 1) == [f"notify {workflow.pk}"]


def test_a_taken_task_is_locked_and_comes_back_once_its_lock_ran_out(people, broker):
    first, second = submit(people, "lock-1"), submit(people, "lock-2")
    (taken,) = broker.dequeue()
    assert OrmQ.objects.get(pk=taken[0]).task["name"] == f"notify {first.pk}"
    assert taken_names(broker, 1) == [f"notify {second.pk}"]
    assert broker.dequeue() is None  # both locked for `retry` seconds
    # The first one's worker died: after its lock it is ready again.
    OrmQ.objects.filter(pk=taken[0]).update(lock=OrmQ.objects.get(pk=taken[0]).lock.replace(year=2000))
    assert taken_names(broker, 1) == [f"notify {first.pk}"]


def test_the_sweep_asks_for_a_drain_when_the_queue_is_full_of_other_tasks(people, broker):
    for n in range(3 * settings.Q_CLUSTER["workers"]):
        submit(people, f"inbox-{n}")  # notices only: no drain among them
    workflow = submit(people, "due")
    decide.approve(workflow, by=people["reviewer"])
    OrmQ.objects.filter(pk__in=[row.pk for row in OrmQ.objects.all() if row.task["func"] in queue.DRAINS]).delete()
    assert broker.queue_size() > settings.Q_CLUSTER["workers"] and broker.drains_queued() == 0

    assert worker.tick({queue.STEPS: broker}) is True  # the step is due

    assert broker.drains_queued() == settings.Q_CLUSTER["workers"]
    assert taken_names(broker, 1) == ["drain"]
    worker.tick({queue.STEPS: broker})
    assert broker.drains_queued() == settings.Q_CLUSTER["workers"]  # no more than the workers take


def test_taking_the_next_task_reads_the_queue_index_in_order_without_statistics(people, broker):
    for n in range(3):
        submit(people, f"plan-{n}")
    queryset = OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lt=timezone.now()).order_by("lock", "id")[:1]
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # A fresh table has no statistics (autovacuum off): the plan must not depend on them.
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = " | ".join(row[0] for row in cursor.fetchall())
            assert "Index Scan using durableconsole_ormq_order" in plan and "Sort" not in plan, plan
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " | ".join(row[-1] for row in cursor.fetchall())
            assert "durableconsole_ormq_order" in plan and "TEMP B-TREE" not in plan, plan


@pytest.mark.live
def test_a_cluster_started_after_an_outage_starts_the_effects_before_the_notices(people, start_worker):
    """A real cluster of one worker, started after 60 plans were submitted
    and one approved: its first task is the approval's wake-up, so the step
    went out while the 60 notices queued ahead of it still waited."""
    for n in range(60):
        submit(people, f"waiting-{n}")
    workflow = decide.approve(submit(people, "approved"), by=people["reviewer"])
    notices = OrmQ.objects.count() - 1
    cluster = start_worker("after-outage", Q_WORKERS="1")
    deadline = time.monotonic() + 60
    while not Attempt.objects.filter(step__workflow=workflow).exists():
        assert time.monotonic() < deadline, "the approved step never went out"
        time.sleep(0.01)
    # Read as soon as the attempt exists: most of the notices are still queued.
    left = OrmQ.objects.count()
    # On failure, what the cluster's tasks failed with and its log (a CI run once took 40 of 61).
    taken = f"{notices - left} of {notices} notices were taken before the step went out"
    failed = [(task.func, str(task.result)[:300]) for task in Failure.objects.all()]
    assert left >= notices // 2, f"{taken}; failed tasks: {failed}; the cluster's log:\n{cluster.log()[-6000:]}"


def test_the_sweep_asks_whether_each_kind_of_work_is_due_in_one_statement(people, broker, settings):
    """The worker loop looks every `WORKER_TICK_SECONDS` on every cluster of
    a fleet: what it wakes the messages lane for (webhook deliveries, chat
    messages, notices, previews, lapsed delegations and grants) is asked in
    one `SELECT (...) IS NOT NULL, ...`, not a statement each."""
    settings.SLACK_BOT_TOKEN = "xoxb-sweep"  # chat on: its messages are asked too
    brokers = queue.brokers()
    with CaptureQueriesContext(connection) as idle:
        worker.tick(brokers)
    asked = [
        query["sql"]
        for query in idle.captured_queries
        if any(
            table in query["sql"]
            for table in (
                "workflows_webhookdelivery",
                "workflows_chatmessage",
                "workflows_reviewnotice",
                "workflows_delegation",
                "workflows_standinggrant",
            )
        )
    ]
    assert len(asked) == 1, asked
    assert asked[0].count(") IS NOT NULL") == 6 and "previews_due_at" in asked[0]

    # Due, each wakes its task: a plan's notice and previews here.
    settings.SLACK_BOT_TOKEN = ""
    plans.submit(people["agent"], ticket_plan("sweep"))
    OrmQ.objects.all().delete()  # the submission's wake-ups, lost
    worker.tick(brokers)
    queued = {row.task["func"] for row in OrmQ.objects.all()}
    assert queued == {"workflows.tasks.send_review_notices", "workflows.tasks.compute_due_previews"}


def test_asking_whether_queries_find_rows_in_one_statement_answers_each(people):
    assert db.exist({}) == {}
    assert db.exist({"none": Workflow.objects.none()}) == {"none": False}
    answer = db.exist(
        {"all": Workflow.objects.all(), "skipped": None, "terminal": Workflow.objects.filter(status="COMPLETE")}
    )
    assert answer == {"all": False, "skipped": False, "terminal": False}
    plans.submit(people["agent"], ticket_plan("one"))
    assert db.exist({"all": Workflow.objects.all(), "planned": Workflow.objects.filter(status="PLANNED")}) == {
        "all": True,
        "planned": True,
    }


def test_the_sweeps_look_for_due_previews_reads_their_index_without_statistics(people):
    """Every plan is a row of the table it asks: the look must walk
    `workflow_previews_due` to the first due plan, never the whole table,
    whatever the planner's statistics (an `EXISTS` drops the order, and
    with stale statistics PostgreSQL scanned every plan)."""
    for n in range(3):
        plans.submit(people["agent"], ticket_plan(f"due-{n}"))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # 5,000 plans with nothing due, no statistics (autovacuum off), as after a burst.
            columns = [field.column for field in Workflow._meta.concrete_fields]
            made = {"id": "gen_random_uuid()", "submission_key": "submission_key || n", "previews_due_at": "NULL"}
            cursor.execute(
                f"INSERT INTO workflows_workflow ({', '.join(columns)}) "
                f"SELECT {', '.join(made.get(column, column) for column in columns)} "
                "FROM workflows_workflow, generate_series(1, 5000) AS n WHERE submission_key = 'due-0'"
            )
        with CaptureQueriesContext(connection) as seen:
            assert previews.any_due()
        (look,) = seen.captured_queries
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN {look['sql']}")
            plan = " | ".join(row[0] for row in cursor.fetchall())
            assert "Index Scan using workflow_previews_due" in plan and "Seq Scan" not in plan, plan
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {look['sql']}")
            plan = " | ".join(row[-1] for row in cursor.fetchall())
            assert "workflow_previews_due" in plan and "TEMP B-TREE" not in plan, plan
