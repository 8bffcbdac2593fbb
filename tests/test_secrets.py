"""Secrets and full prompts never reach a row, a log line, a page or an API answer."""

import logging

import pytest
from django.db import connection
from django.test import Client

from tests.conftest import PASSWORD, HttpApi, wait_for_status
from workflows import redaction
from workflows.models import DeadLetter

pytestmark = pytest.mark.live

BEARER = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
API_KEY = "k3y-0f-the-kingdom-93a1"
PROMPT = "You are the capacity agent. PROMPT-MARKER-7c1e " + "Think step by step about the disks. " * 80


def planted_plan():
    return {
        "name": "planted secrets",
        "submission_key": "secrets-1",
        "context": {"prompt": PROMPT, "notes": PROMPT, "run": "nightly"},
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {
                "title": "Rotate credentials",
                "body": f"use Authorization: Bearer {BEARER} and {AWS_KEY}",
                "api_key": API_KEY,
                "headers": {"Authorization": f"Bearer {BEARER}"},
            }},
        ],
    }


def secrets_in(text: str) -> list[str]:
    return [s for s in (BEARER, AWS_KEY, API_KEY, "PROMPT-MARKER-7c1e") if s in text]


def every_row_as_text() -> str:
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            chunks.append(repr(cursor.fetchall()))
    return "\n".join(chunks)


def test_planted_secrets_appear_nowhere(people, live_server, start_worker, desk, caplog):
    caplog.set_level(logging.DEBUG)
    worker = start_worker(LOG_LEVEL="DEBUG", Q_LOG_LEVEL="DEBUG")
    desk.fault(mode="error", status=422, count=1)  # the step dead-letters, so a trace is written
    agent, reviewer, operator = (HttpApi(live_server.url, people[n]) for n in ("agent", "reviewer", "operator"))

    submitted = agent.post("/workflows", planted_plan())
    assert submitted.status_code == 201
    workflow_id = submitted.json()["id"]
    assert reviewer.post(f"/workflows/{workflow_id}/approve", {"comment": "ok"}).status_code == 200
    wait_for_status(workflow_id, "FAILED")
    entry = DeadLetter.objects.get(workflow_id=workflow_id)
    assert desk.faults() == []  # the planted failure really happened

    answers = [submitted.text]
    answers.append(agent.get(f"/workflows/{workflow_id}").text)
    answers.append(operator.get(f"/dead-letters/{entry.pk}").text)
    answers.append(operator.get(f"/dead-letters/{entry.pk}/preview").text)
    answers.append(operator.get("/dead-letters").text)
    browser = Client()
    assert browser.login(username="operator", password=PASSWORD)
    for path in (f"/workflows/{workflow_id}/", "/workflows/", f"/dead-letters/{entry.pk}/", "/dead-letters/"):
        page = browser.get(path)
        assert page.status_code == 200, path
        answers.append(page.content.decode())
    for answer in answers:
        assert secrets_in(answer) == []
    assert "[REDACTED]" in answers[5]  # the workflow page shows args: redacted, not silently dropped

    worker.stop()
    assert "dead_letter" in every_row_as_text()  # the scan sees the rows
    assert secrets_in(every_row_as_text()) == []
    assert secrets_in(worker.log()) == []
    assert secrets_in(caplog.text) == []
    # Redaction happens on the way in, so the remote system never saw them either.
    assert secrets_in(repr(desk.ledger())) == []


def test_log_lines_are_scrubbed_even_when_code_logs_a_secret(caplog):
    logger = logging.getLogger("workflows.test")
    handler = logging.StreamHandler()
    handler.addFilter(redaction.RedactingFilter())
    records = []
    handler.emit = lambda record: records.append(handler.format(record))
    logger.addHandler(handler)
    try:
        logger.error("calling with Authorization: Bearer %s", BEARER)
    finally:
        logger.removeHandler(handler)
    assert records and BEARER not in records[0]
