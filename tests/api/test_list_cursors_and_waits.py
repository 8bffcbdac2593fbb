"""Lists and the long-poll wait refuse hostile input with exactly the 400
and error code the API documents (docs/reference/http-api.md#http-api, docs/explanation/trust-core.md#no-5xx-on-input,
docs/explanation/agents.md#waiting): a cursor no page gave out, on every list of the published schema and of the
console; a wait for anything but a decision or the end, or for other than 1 to 60 seconds.
A real cursor still pages."""

import pytest

from tests.support.hostile import CONSOLE_LISTS, FORGED_CURSORS, ZERO_UUID, api_lists, console_lists
from tests.support.plans import ticket_plan
from workflows.models import Workflow
from workflows.operations import plans
from workflows.web import waiting
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery


def test_a_forged_cursor_is_a_400_with_its_code_on_every_list(admin_api, admin_console):
    lists = api_lists(admin_api)
    assert {"/api/v1/workflows", "/api/v1/dead-letters", "/api/v1/audit", "/api/v1/webhook-deliveries"} <= set(lists)
    assert console_lists() == sorted(CONSOLE_LISTS)
    wrong = {}
    for path in lists + CONSOLE_LISTS:
        client = admin_api if path.startswith("/api/") else admin_console
        for forgery, cursor in FORGED_CURSORS.items():
            response = client.get(path, {"cursor": cursor})
            text = response.content.decode()
            if path.startswith("/api/"):
                right = response.status_code == 400 and response.json()["error"]["code"] == "invalid_cursor"
            else:
                right = response.status_code == 400 and "cursor is not valid" in text
            if not right:
                wrong[f"{path} {forgery}"] = (response.status_code, text[:200])
    assert not wrong, wrong


WAIT_REFUSALS = [
    ({"until": "x"}, "until"),
    ({"until": ""}, "until"),
    ({"until": "DECISION"}, "until"),
    ({"until": "decision,terminal"}, "until"),
    ({"timeout": "0"}, "timeout"),
    ({"timeout": "61"}, "timeout"),
    ({"timeout": "-1"}, "timeout"),
    ({"timeout": "abc"}, "timeout"),
    ({"timeout": "1.5"}, "timeout"),
    ({"timeout": "٣"}, "timeout"),
    ({"timeout": "²"}, "timeout"),
    ({"timeout": "9" * 30}, "timeout"),
    ({"timeout": "9" * 5000}, "timeout"),
    ({"timeout": "NaN"}, "timeout"),
    ({"timeout": ""}, "timeout"),
]


@pytest.mark.parametrize("query, field", WAIT_REFUSALS, ids=[repr(q)[:40] for q, _ in WAIT_REFUSALS])
def test_the_long_poll_wait_refuses_a_bad_until_or_timeout_naming_it(query, field, people, admin_api, monkeypatch):
    waited = []
    monkeypatch.setattr(waiting, "wait_for", lambda *args, **kwargs: waited.append(args))
    workflow = plans.submit(people["agent"], ticket_plan(key="waited")).workflow
    response = admin_api.get(f"/api/v1/workflows/{workflow.pk}/wait", query)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and list(error["fields"]) == [field], error
    assert waited == []  # refused before any wait began


def test_the_long_poll_wait_refuses_nul_and_answers_good_values(people, admin_api):
    workflow = plans.submit(people["agent"], ticket_plan(key="waited")).workflow
    url = f"/api/v1/workflows/{workflow.pk}/wait"
    for query in ({"until": "\x00"}, {"timeout": "\x00"}):
        response = admin_api.get(url, query)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid", query
        assert "NUL" in response.json()["error"]["message"]
    unknown = admin_api.get(f"/api/v1/workflows/{ZERO_UUID}/wait", {"timeout": "1"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    # The bounds themselves are accepted: a one-second wait on a plan nobody decides answers as it stands.
    answered = admin_api.get(url, {"until": "terminal", "timeout": "1"})
    assert answered.status_code == 200 and answered.json()["status"] == "PLANNED"


def test_a_real_cursor_still_pages(people, admin_api):
    for n in range(3):
        plans.submit(people["agent"], ticket_plan(key=f"page-{n}"))
    first = admin_api.get("/api/v1/workflows", {"limit": 2}).json()
    second = admin_api.get("/api/v1/workflows", {"limit": 2, "cursor": first["next"]}).json()
    assert len(first["items"]) == 2 and len(second["items"]) == 1
    events = admin_api.get("/api/v1/audit", {"limit": 1}).json()
    assert admin_api.get("/api/v1/audit", {"limit": 1, "cursor": events["next"]}).status_code == 200
    endpoint, _ = webhook_endpoints.create(by=people["operator"], url="https://hooks.example.com/in")
    for workflow in Workflow.objects.all():
        WebhookDelivery.objects.create(event="workflow.failed", workflow=workflow, endpoint=endpoint, body="{}")
    first = admin_api.get("/api/v1/webhook-deliveries", {"limit": 2}).json()
    second = admin_api.get("/api/v1/webhook-deliveries", {"limit": 2, "cursor": first["next"]}).json()
    assert len(first["items"]) == 2 and len(second["items"]) == 1 and second["next"] is None
    assert {d["id"] for d in first["items"]}.isdisjoint(d["id"] for d in second["items"])
