"""The HTMX console through Django's test client: who sees what, and
every decision works both as an htmx swap and as a plain form post."""

import pytest

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows.models import Approval, AuditEvent, Workflow
from workflows.operations import plans

HTMX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE_BREAKOUT = '"><img src=x onerror=alert(1)>'


def _submit(user, key="plan-1", name=None):
    plan = ticket_plan(key)
    if name is not None:
        plan["name"] = name
    return plans.submit(user, plan).workflow


@pytest.fixture
def as_user(people):
    """A test client logged in as one persona."""

    def client_for(name, **client_options):
        client = Client(**client_options)
        client.force_login(people[name])
        return client

    return client_for


@pytest.fixture
def planned(people):
    return _submit(people["agent"])


def _page(workflow):
    return f"/workflows/{workflow.pk}/"


def _html(response):
    return response.content.decode()


def test_anonymous_users_are_sent_to_log_in(planned):
    client = Client()
    for path in ("/", "/workflows/", _page(planned)):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/login/?next="), path


def test_anonymous_approve_changes_nothing(planned):
    response = Client().post(f"{_page(planned)}approve", {"comment": "drive-by"})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert Workflow.objects.get(pk=planned.pk).status == "PLANNED"
    assert not Approval.objects.exists()


def test_login_form_logs_the_reviewer_in(people):
    client = Client()
    assert 'for="id_username"' in _html(client.get("/login/"))
    response = client.post("/login/", {"username": "reviewer", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_login_with_a_wrong_password_shows_the_error(people):
    client = Client()
    response = client.post("/login/", {"username": "reviewer", "password": "wrong"})
    assert response.status_code == 200
    assert "Your username and password didn't match" in _html(response)
    assert client.get("/").status_code == 302


def test_inbox_lists_plans_of_others_awaiting_review(people, as_user):
    from_agent = _submit(people["agent"], key="from-agent", name="Plan from the agent")
    from_admin = _submit(people["admin"], key="from-admin", name="Plan from the admin")
    decided = _submit(people["agent"], key="decided", name="Plan already rejected")
    as_user("reviewer2").post(f"{_page(decided)}reject")
    assert Workflow.objects.get(pk=decided.pk).status == "REJECTED"

    reviewer_inbox = _html(as_user("reviewer").get("/"))
    assert from_agent.name in reviewer_inbox
    assert from_admin.name in reviewer_inbox
    assert decided.name not in reviewer_inbox

    admin_inbox = _html(as_user("admin").get("/"))
    assert from_agent.name in admin_inbox
    assert from_admin.name not in admin_inbox


def test_htmx_inbox_request_gets_only_the_rows(planned, as_user):
    response = as_user("reviewer").get("/", **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert planned.name in html
    assert "<tbody>" in html
    assert "<html" not in html
    assert "Plans awaiting your review" not in html


def test_workflow_page_shows_steps_operation_keys_and_audit(planned, as_user):
    html = _html(as_user("reviewer").get(_page(planned)))
    assert "<html" in html
    for step in planned.steps.all():
        assert f"<code>{step.key}</code>" in html
        assert step.operation_key in html
    assert "ticket.create" in html
    assert AuditEvent.objects.filter(workflow_id=planned.pk, verb="workflow.submitted").exists()
    assert "workflow.submitted" in html


def test_htmx_workflow_request_gets_only_the_live_partial(planned, as_user):
    response = as_user("reviewer").get(_page(planned), **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html
    assert "← Workflows" not in html
    assert 'data-testid="workflow-status">PLANNED<' in html
    assert planned.steps.first().operation_key in html


def test_approve_without_javascript_redirects_to_the_workflow(planned, as_user):
    client = as_user("reviewer")
    response = client.post(f"{_page(planned)}approve", {"comment": "Ticket text checked"})
    assert response.status_code == 302
    assert response["Location"] == _page(planned)
    assert Workflow.objects.get(pk=planned.pk).status == "APPROVED"
    approval = Approval.objects.get(workflow=planned)
    assert (approval.reviewer.username, approval.decision, approval.comment) == (
        "reviewer",
        "APPROVE",
        "Ticket text checked",
    )
    page = _html(client.get(response["Location"]))
    assert f"Approved: {planned.name}" in page
    assert 'data-testid="workflow-status">APPROVED<' in page


def test_approve_with_htmx_swaps_the_partial(planned, as_user):
    response = as_user("reviewer").post(f"{_page(planned)}approve", {"comment": "Fine by me"}, **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html
    assert 'data-testid="workflow-status">APPROVED<' in html
    assert f"Approved: {planned.name}" in html
    assert Approval.objects.get(workflow=planned).comment == "Fine by me"


def test_reject_without_javascript_redirects_to_the_workflow(planned, as_user):
    client = as_user("reviewer")
    response = client.post(f"{_page(planned)}reject", {"comment": "Wrong floor"})
    assert response.status_code == 302
    assert response["Location"] == _page(planned)
    assert Workflow.objects.get(pk=planned.pk).status == "REJECTED"
    approval = Approval.objects.get(workflow=planned)
    assert (approval.decision, approval.comment) == ("REJECT", "Wrong floor")
    page = _html(client.get(response["Location"]))
    assert f"Rejected: {planned.name}" in page
    assert 'data-testid="workflow-status">REJECTED<' in page


def test_reject_with_htmx_swaps_the_partial(planned, as_user):
    response = as_user("reviewer").post(f"{_page(planned)}reject", {"comment": "Not today"}, **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html
    assert 'data-testid="workflow-status">REJECTED<' in html
    assert Approval.objects.get(workflow=planned).decision == "REJECT"


def test_console_refuses_self_approval(people, as_user):
    own = _submit(people["admin"], key="own")  # admin is a reviewer too
    client = as_user("admin")
    assert "Approve</button>" not in _html(client.get(_page(own)))

    response = client.post(f"{_page(own)}approve", {"comment": "mine"})
    assert response.status_code == 302
    assert Workflow.objects.get(pk=own.pk).status == "PLANNED"
    assert not Approval.objects.exists()
    assert "A plan cannot be reviewed by the user who submitted it." in _html(client.get(_page(own)))

    swapped = client.post(f"{_page(own)}approve", {"comment": "mine"}, **HTMX)
    assert swapped.status_code == 200
    assert "A plan cannot be reviewed by the user who submitted it." in _html(swapped)
    assert 'data-testid="workflow-status">PLANNED<' in _html(swapped)
    assert Workflow.objects.get(pk=own.pk).status == "PLANNED"


def test_console_refuses_a_non_reviewer(planned, as_user):
    client = as_user("operator")
    page = _html(client.get(_page(planned)))
    assert "Approve</button>" not in page
    assert "Reject</button>" not in page

    for decision in ("approve", "reject"):
        response = client.post(f"{_page(planned)}{decision}", {"comment": "not my call"})
        assert response.status_code == 403
    assert Workflow.objects.get(pk=planned.pk).status == "PLANNED"
    assert not Approval.objects.exists()


def test_reviewer_sees_the_decision_buttons(planned, as_user):
    page = _html(as_user("reviewer").get(_page(planned)))
    assert "Approve</button>" in page
    assert "Reject</button>" in page


def test_post_without_csrf_token_is_forbidden(planned, as_user):
    client = as_user("reviewer", enforce_csrf_checks=True)
    response = client.post(f"{_page(planned)}approve", {"comment": "forged"})
    assert response.status_code == 403
    assert Workflow.objects.get(pk=planned.pk).status == "PLANNED"
    assert not Approval.objects.exists()


def test_hostile_plan_text_is_escaped(people, as_user):
    plan = ticket_plan("hostile")
    plan["name"] = f"{SCRIPT}{ATTRIBUTE_BREAKOUT}"
    plan["steps"][0]["args"] = {"title": SCRIPT, "body": ATTRIBUTE_BREAKOUT}
    workflow = plans.submit(people["agent"], plan).workflow
    client = as_user("reviewer")

    for response in (
        client.get("/"),
        client.get("/", **HTMX),
        client.get("/workflows/"),
        client.get(_page(workflow)),
        client.get(_page(workflow), **HTMX),
    ):
        html = _html(response)
        assert SCRIPT not in html
        assert "<img" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_get_on_approve_is_not_allowed(planned, as_user):
    client = as_user("reviewer")
    assert client.get(f"{_page(planned)}approve").status_code == 405
    assert client.get(f"{_page(planned)}reject").status_code == 405
    assert Workflow.objects.get(pk=planned.pk).status == "PLANNED"


def test_inbox_shows_each_step_with_args_risk_and_how_it_would_be_undone(people, client, settings):
    from workflows.audit import secrets
    from workflows.engine import policy
    from workflows.operations import plans

    policy.update("email.send", by="admin", risk="HIGH")
    settings.SECRETS_POLICY = {
        "DESK_KEY": {"actions": ["ticket.create"], "hosts": [secrets.host_of(settings.TICKET_DESK_URL)]}
    }
    plans.submit(
        people["agent"],
        {
            "name": "mixed",
            "submission_key": "mixed",
            "steps": [
                {
                    "key": "open",
                    "action": "ticket.create",
                    "args": {"title": "<b>t</b>", "body": {"$secret": "DESK_KEY"}},
                },
                {"key": "mail", "action": "email.send", "args": {"to": "a@example.com", "subject": "s", "body": "b"}},
            ],
        },
    )
    assert client.login(username="reviewer", password=PASSWORD)
    html = client.get("/").content.decode()
    assert "compensated by <code>ticket.close</code>" in html
    assert "irreversible" in html
    assert "HIGH risk" in html  # the plan's highest risk
    assert "&lt;b&gt;t&lt;/b&gt;" in html and "<b>t</b>" not in html
    assert "secret:DESK_KEY" in html and "$secret" not in html
    assert "0 of 1 approval" in html


def test_the_inbox_pages_by_keyset_without_counting(people, client, django_assert_max_num_queries):
    from workflows.operations import plans
    from workflows.web.views import plans as inbox_views

    for n in range(inbox_views.PAGE_SIZE + 3):
        plans.submit(people["agent"], ticket_plan(f"page-{n}"))
    assert client.login(username="reviewer", password=PASSWORD)
    first = client.get("/").content.decode()
    assert first.count('class="card plan"') == inbox_views.PAGE_SIZE
    cursor = first.split("?cursor=")[1].split('"')[0]
    # The page's keys, read by themselves in the index's order under fixed
    # plans (the planner's two settings set and put back; a savepoint here,
    # inside the test's transaction), then its rows by key: no count.
    with django_assert_max_num_queries(13):
        second = client.get(f"/?cursor={cursor}").content.decode()
    assert second.count('class="card plan"') == 3
    assert "Older plans" not in second
