"""Bench part (n): signed clicks over HTTP to a production-style web
process, decided by a real cluster, each plan APPROVED, p50/p95 reported."""

import json
from io import StringIO

from django.core.management import call_command

from workflows.models import AuditEvent
from workflows.ops.bench.slack_clicks import CLICKS, SLACK_USER
from workflows.ops.processes import database_url


def test_slack_clicks_part_approves_every_plan_by_a_signed_click(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the processes it starts work on the test database
    json_path, out = tmp_path / "bench.json", StringIO()
    call_command(
        "bench",
        "--only",
        "n",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result = json.loads(json_path.read_text())
    assert result["errors"] == {}
    clicks = result["slack_clicks"]
    assert clicks["click_to_approved_ms"]["n"] == CLICKS and clicks["answered_on_response_url"] == CLICKS
    approved = AuditEvent.objects.filter(verb="workflow.approved", subject=SLACK_USER, issuer="slack:T0BENCH")
    assert approved.count() == CLICKS
    assert "click → APPROVED" in out.getvalue()
