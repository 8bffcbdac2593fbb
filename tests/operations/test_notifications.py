"""Reviewers hear about plans that await them, with a link."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from workflows import queue, tasks
from workflows.models import AuditEvent, ReviewNotice
from workflows.operations import notifications, plans


def test_reviewers_other_than_the_submitter_get_an_email_with_a_link(people, settings):
    settings.CONSOLE_URL = "https://console.example"
    for name in ("reviewer", "reviewer2", "admin", "operator"):
        people[name].email = f"{name}@example.com"
        people[name].save()
    workflow = plans.submit(people["admin"], ticket_plan()).workflow  # admin is a reviewer: not told of their own
    assert tasks.notify_reviewers(str(workflow.pk)) == 2
    assert sorted(m.to[0] for m in mail.outbox) == ["reviewer2@example.com", "reviewer@example.com"]
    assert f"https://console.example/workflows/{workflow.pk}/" in mail.outbox[0].body
    assert AuditEvent.objects.filter(verb="reviewers.notified", workflow_id=workflow.pk).exists()


def test_no_notice_once_the_plan_is_decided(people):
    people["reviewer2"].email = "r2@example.com"
    people["reviewer2"].save()
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    decide.reject(workflow, by=people["reviewer"], comment="no")
    assert tasks.notify_reviewers(str(workflow.pk)) == 0
    assert mail.outbox == []


def test_an_optional_webhook_is_called(people, settings):
    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    settings.REVIEW_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/hook"
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    tasks.notify_reviewers(str(workflow.pk))
    thread.join(5)
    server.server_close()
    [payload] = received
    assert {key: payload[key] for key in ("event", "workflow_id", "name", "url", "risk", "revision")} == {
        "event": "plan.awaiting_review",
        "workflow_id": str(workflow.pk),
        "name": workflow.name,
        "url": f"{settings.CONSOLE_URL}/workflows/{workflow.pk}/",
        "risk": "LOW",
        "revision": 1,
    }
    # Two buttons per reviewer, each reviewer's own links; never the submitter's.
    assert [r["username"] for r in payload["reviewers"]] == ["reviewer", "reviewer2", "admin"]
    for reviewer in payload["reviewers"]:
        assert [action["label"] for action in reviewer["actions"]] == ["Approve", "Reject"]
        assert all(action["url"].startswith(f"{settings.CONSOLE_URL}/review/link/") for action in reviewer["actions"])
    assert "1. ticket.create (open)" in payload["text"] and "Time left to decide" in payload["text"]


def test_submission_writes_the_notice_and_queues_its_wake_up(people):
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    [notice] = ReviewNotice.objects.filter(workflow=workflow)
    assert (notice.kind, notice.sent_at, notice.deadline) == (ReviewNotice.Kind.NOTICE, None, workflow.deadline)
    queued = [(task.key, task.func(), task.args()) for task in OrmQ.objects.all()]
    assert (queue.lane_key(queue.MESSAGES), "workflows.tasks.send_review_notices", ()) in queued
    assert tasks.send_review_notices() == 1
    assert AuditEvent.objects.filter(verb="reviewers.notified", workflow_id=workflow.pk).count() == 1
    assert tasks.send_review_notices() == 0 and tasks.notify_reviewers(str(workflow.pk)) == 0  # each once


def test_a_burst_decided_before_its_notices_costs_one_task_and_a_few_statements(people):
    """Plans submitted and decided while no worker ran: the messages lane
    keeps one wake-up per worker of the burst's (the rest are dropped at
    the first take), and that task settles every first notice in a few
    statements (three per thousand), unsent and unrecorded: no task, mail or event per plan."""
    people["reviewer2"].email = "r2@example.com"
    people["reviewer2"].save()
    burst = [plans.submit(people["agent"], ticket_plan(key=f"burst-{n}")).workflow for n in range(30)]
    for workflow in burst:
        decide.reject(workflow, by=people["reviewer"], comment="not now")
    broker = queue.brokers()[queue.MESSAGES]
    taken = broker.dequeue()
    assert [SignedPackage.loads(payload)["func"] for _, payload in taken] == ["workflows.tasks.send_review_notices"]
    waiting = [task.func() for task in OrmQ.objects.filter(key=broker.list_key, lock__lt=timezone.now())]
    assert waiting.count("workflows.tasks.send_review_notices") <= queue.workers(queue.STEPS)
    with CaptureQueriesContext(connection) as queries:
        assert tasks.send_review_notices() == len(burst)
    assert len(queries) <= 6, [query["sql"] for query in queries]
    assert mail.outbox == []
    assert not AuditEvent.objects.filter(verb="reviewers.notified").exists()
    assert set(ReviewNotice.objects.values_list("outcome", flat=True)) == {notifications.MOOT}


def test_first_notices_of_decided_plans_are_settled_batch_by_batch_past_plans_still_waiting(people, monkeypatch):
    monkeypatch.setattr(notifications, "MOOT_BATCH", 4)
    waiting = [plans.submit(people["agent"], ticket_plan(key=f"waiting-{n}")).workflow for n in range(2)]
    decided = [plans.submit(people["agent"], ticket_plan(key=f"decided-{n}")).workflow for n in range(9)]
    for workflow in decided:
        decide.reject(workflow, by=people["reviewer"], comment="not now")

    assert notifications._moot() == len(decided)  # each batch holds the two waiting plans' notices too
    assert set(ReviewNotice.objects.filter(workflow__in=decided).values_list("outcome", flat=True)) == {
        notifications.MOOT
    }
    assert not ReviewNotice.objects.filter(workflow__in=waiting, sent_at__isnull=False).exists()
