"""Wake-ups by LISTEN/NOTIFY on PostgreSQL: an approval's transaction sends
NOTIFY with its queued wake-up, and a cluster's broker, waiting on its one
LISTEN connection, looks at the queue when it arrives instead of at the next
poll. The queue stays the record; SQLite and Redis keep polling.
"""

import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from tests.support.running import wait_for_status
from workflows import queue
from workflows.queue import CHANNEL, ListeningBroker

pytestmark = pytest.mark.django_db(transaction=True)

NOOP_PLAN = {"name": "one noop", "submission_key": "wake-1", "steps": [{"key": "s", "action": "noop", "args": {}}]}


@pytest.fixture
def postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY wake-ups are PostgreSQL's; SQLite polls")


@pytest.fixture
def listening(postgresql):
    """Makes a broker listening from now on, as a cluster's pusher holds it; closed after the test."""
    made = []

    def listen():
        broker = ListeningBroker(list_key=Conf.CLUSTER_NAME)
        broker._listen()
        made.append(broker)
        return broker

    yield listen
    for broker in made:
        if broker._listener is not None:
            broker._listener.close()


def submitted(api, key="wake-1"):
    response = api["agent"].post("/workflows", {**NOOP_PLAN, "submission_key": key})
    assert response.status_code == 201, response.content
    OrmQ.objects.all().delete()  # the reviewers' notice: not what these tests wait for
    return response.json()["id"]


def test_postgresql_with_the_orm_broker_listens(postgresql, settings):
    assert settings.Q_CLUSTER["broker_class"] == "workflows.queue.ListeningBroker"
    assert Conf.BROKER_CLASS == "workflows.queue.ListeningBroker"


def pushing(broker) -> tuple[threading.Thread, list]:
    """A pusher's loop on its own thread, taking from `broker` until it
    takes a task or has been woken three times; the tasks it took."""
    taken = []

    def pusher():
        try:
            while not taken and broker.woken < 3:
                taken.extend(broker.dequeue() or [])
        finally:
            connections.close_all()

    thread = threading.Thread(target=pusher, daemon=True)
    thread.start()
    return thread, taken


def test_approval_commit_wakes_a_broker_waiting_on_listen(listening, api, monkeypatch):
    workflow_id = submitted(api)
    # A poll longer than the test may wait: only the notification can end the wait.
    monkeypatch.setattr(Conf, "POLL", 600)
    broker = listening()
    thread, taken = pushing(broker)
    response = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "ok"})
    assert response.status_code == 200, response.content
    thread.join(60)

    assert not thread.is_alive(), "the broker was not woken"
    assert broker.woken == 1
    assert len(taken) == 1
    assert OrmQ.objects.get(pk=taken[0][0]).task["name"] == f"run {workflow_id}"


def test_the_worker_loops_own_wake_up_wakes_a_broker_at_once(listening, monkeypatch):
    """A drain the worker loop's sweep queues, outside any transaction,
    carries its NOTIFY too: it is taken then, not at the next poll."""
    monkeypatch.setattr(Conf, "POLL", 600)
    broker = listening()
    thread, taken = pushing(broker)
    time.sleep(0.5)  # waiting on LISTEN, the queue empty
    queue.send("workflows.tasks.drain", name="drain", brokers=queue.brokers())
    thread.join(60)

    assert not thread.is_alive(), "the broker was not woken"
    assert broker.woken == 1
    assert OrmQ.objects.get(pk=taken[0][0]).task["name"] == "drain"


def test_a_rolled_back_wake_up_wakes_nobody(listening, api, monkeypatch):
    workflow_id = submitted(api)
    monkeypatch.setattr(Conf, "POLL", 0.5)
    broker = listening()

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        queue.enqueue("workflows.tasks.run_workflow", workflow_id, name=f"run {workflow_id}")
        raise Undo

    assert broker.dequeue() is None
    assert broker.woken == 0
    assert not OrmQ.objects.exists()


def test_notifications_of_one_burst_wake_the_broker_for_one_look(listening, api, monkeypatch):
    ids = [submitted(api, key=f"wake-{n}") for n in range(3)]
    monkeypatch.setattr(Conf, "POLL", 0.5)
    broker = listening()
    for workflow_id in ids:  # three commits, three notifications
        assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "ok"}).status_code == 200
    taken = [broker.dequeue() for _ in range(3)]  # the queue has them all, without a wait
    assert [len(tasks) for tasks in taken] == [1, 1, 1] and broker.woken == 0
    assert broker.dequeue() is None  # the three notifications waiting: one wake-up, drained at once
    assert broker.woken == 1
    assert broker.dequeue() is None
    assert broker.woken == 1


def _listening_sessions(application_name, channel=CHANNEL):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = %s",
            [application_name, f"LISTEN {channel}"],
        )
        return cursor.fetchone()[0]


def test_a_cluster_holds_one_listen_connection_per_lane_and_a_notify_starts_its_step_and_its_notice(
    postgresql, api, start_worker
):
    workflow_id = submitted(api)
    messages = queue.channel(queue.MESSAGES)
    # Polling every 10 minutes: the step can only start this test's way if the
    # approval's NOTIFY wakes the cluster's pusher.
    worker = start_worker("listening", Q_WORKERS="4", Q_MESSAGE_WORKERS="2", Q_POLL="600", PGAPPNAME="wakeups-test")
    deadline = time.monotonic() + 30
    while not (_listening_sessions("wakeups-test") and _listening_sessions("wakeups-test", messages)):
        assert time.monotonic() < deadline, "the lanes' pushers never listened"
        time.sleep(0.1)
    # One per lane, not one per worker.
    assert (_listening_sessions("wakeups-test"), _listening_sessions("wakeups-test", messages)) == (1, 1)

    response = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "ok"})
    assert response.status_code == 200, response.content
    assert wait_for_status(workflow_id, "COMPLETE", timeout=60) == "COMPLETE"
    # A submission's notice goes to the messages lane, and its own NOTIFY wakes that lane's pusher.
    response = api["agent"].post("/workflows", {**NOOP_PLAN, "submission_key": "wake-notice"})
    assert response.status_code == 201, response.content
    notices = OrmQ.objects.filter(key=queue.lane_key(queue.MESSAGES))
    deadline = time.monotonic() + 30
    while notices.exists():  # taken and acknowledged (deleted) by a worker of the messages lane
        assert time.monotonic() < deadline, "the notice waited for the poll"
        time.sleep(0.1)
    assert (_listening_sessions("wakeups-test"), _listening_sessions("wakeups-test", messages)) == (1, 1)
    # Let a graceful stop through: each lane's pusher leaves its wait at the next notification.
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    while stopper.is_alive():
        with connection.cursor() as cursor:
            for channel in (CHANNEL, messages):
                cursor.execute("SELECT pg_notify(%s, '')", [channel])
        stopper.join(0.2)


def test_sqlite_and_redis_do_not_listen(settings):
    if connection.vendor == "postgresql" and "orm" in settings.Q_CLUSTER:
        assert settings.Q_CLUSTER["broker_class"] == "workflows.queue.ListeningBroker"
    elif "orm" in settings.Q_CLUSTER:
        assert settings.Q_CLUSTER["broker_class"] == "workflows.queue.QueueBroker"
    else:
        assert "broker_class" not in settings.Q_CLUSTER


def test_an_idle_listening_broker_looks_at_its_queue_once_a_second_not_every_poll(listening, monkeypatch):
    """Every task queued here sends a NOTIFY, so a listening pusher with
    nothing to do looks at its queue only every `LISTENING_LOOK_SECONDS`
    (an idle cluster's pushers looked every `Q_POLL`, ten times a second
    each, on a fleet's one PostgreSQL). What comes due without a NOTIFY, a
    task whose worker died, ready again once its `Q_RETRY` lapsed, is taken
    at the next look."""
    monkeypatch.setattr(Conf, "POLL", 0.1)
    broker = listening()
    looks = []
    take = broker._take
    monkeypatch.setattr(broker, "_take", lambda: looks.append(time.monotonic()) or take())
    began = time.monotonic()
    while time.monotonic() - began < 3:
        assert broker.dequeue() is None
    assert len(looks) <= 3 / queue.LISTENING_LOOK_SECONDS + 1, f"{len(looks)} looks in 3 s"

    # A task taken by a worker that died: its lock lapsed, and nothing notified.
    lapsed = OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload=drain_payload(), lock=timezone.now())
    assert [pk for pk, _ in broker.dequeue()] == [lapsed.pk]


def drain_payload() -> str:
    return SignedPackage.dumps(
        {"id": "lapsed", "name": "drain", "func": "workflows.tasks.drain", "args": (), "kwargs": {}}
    )
