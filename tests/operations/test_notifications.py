"""Reviewers hear about plans that await them, with a link."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from django.core import mail

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from workflows import tasks
from workflows.models import AuditEvent
from workflows.operations import plans


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


def test_submission_queues_the_notice(people):
    from django_q.models import OrmQ

    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    queued = [(task.func(), task.args()) for task in OrmQ.objects.all()]
    assert queued.count(("workflows.tasks.notify_reviewers", (str(workflow.pk),))) == 1
