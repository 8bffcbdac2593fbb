"""The compensation console: an operator requests an undo of completed
steps, a reviewer other than the requester authorizes or declines it, and
everyone allowed can watch it run. Every refusal changes nothing."""

import pytest

from tests.support import deciding as decide
from tests.support.compensating import closes_per_ticket, failed_workflow, three_steps
from tests.support.running import run_until
from tests.support.seeing import Client
from workflows.models import Compensation, Step
from workflows.operations import compensation
from workflows.web.views import compensations

HTMX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE_BREAKOUT = '"><img src=x onerror=alert(1)>'
LIST = "/compensations/"


def mixed_plan(key="mixed"):
    """A ticket, a mail that cannot be unsent, then a step that cannot succeed."""
    return {
        "name": "Ticket and mail",
        "submission_key": key,
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}},
            {"key": "mail", "action": "email.send", "args": {"to": "a@example.com", "subject": "s", "body": "b"}},
            {
                "key": "fail",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.missing"}, "body": "x"},
            },
        ],
    }


@pytest.fixture
def as_user(people):
    def client_for(name, **client_options):
        client = Client(**client_options)
        client.force_login(people[name])
        return client

    return client_for


@pytest.fixture
def failed(people, desk):
    workflow = failed_workflow(people)
    assert Step.objects.get(workflow=workflow, key="third").status == "DEAD_LETTERED"
    return workflow


@pytest.fixture
def requested(failed, people):
    return compensation.request(failed, by=people["operator"], reason="incident cancelled")


def _request_page(workflow):
    return f"/workflows/{workflow.pk}/compensate"


def _page(comp):
    return f"/compensations/{comp.pk}/"


def _html(response):
    return response.content.decode()


def _undo_rows(html):
    return html.count('data-testid="undo-row"')


def _unchanged(comp):
    comp.refresh_from_db()
    assert comp.status == "REQUESTED"
    assert comp.authorized_by is None and comp.decided_at is None
    assert not comp.steps.exists()
    assert comp.workflow.status == "FAILED"


# --- the workflow page ------------------------------------------------------------


def test_operator_sees_the_request_link_on_a_failed_workflow(failed, as_user):
    html = _html(as_user("operator").get(f"/workflows/{failed.pk}/"))
    assert f'href="{_request_page(failed)}"' in html
    assert html.count('data-testid="request-compensation"') == 1
    assert "No compensation requested." in html


@pytest.mark.parametrize("persona", ["reviewer", "auditor"])
def test_others_do_not_see_the_request_link(failed, as_user, persona):
    html = _html(as_user(persona).get(f"/workflows/{failed.pk}/"))
    assert _request_page(failed) not in html
    assert "Compensations</h2>" in html


def test_the_workflow_page_lists_its_compensations_and_hides_the_link_while_one_is_open(requested, as_user):
    html = _html(as_user("operator").get(f"/workflows/{requested.workflow_id}/"))
    assert _request_page(requested.workflow) not in html
    assert html.count('data-testid="compensation-row"') == 1
    assert f'href="{_page(requested)}"' in html
    assert "REQUESTED" in html and "incident cancelled" in html and ">operator</td>" in html


def test_no_request_link_when_no_step_completed(people, desk, as_user):
    nothing_done = {
        "name": "Fails at once",
        "submission_key": "at-once",
        "steps": [
            {"key": "only", "action": "ticket.create", "args": {"title": "never lands"}},
        ],
    }
    desk.fault(mode="error", status=400)  # the desk refuses it
    workflow = failed_workflow(people, nothing_done)
    assert _request_page(workflow) not in _html(as_user("operator").get(f"/workflows/{workflow.pk}/"))
    html = _html(as_user("operator").get(_request_page(workflow)))
    assert "This workflow has no completed step to compensate." in html and 'name="steps"' not in html


# --- the request page -------------------------------------------------------------


def test_request_page_lists_each_completed_step_with_its_undo(failed, as_user):
    response = as_user("operator").get(_request_page(failed))
    assert response.status_code == 200
    html = _html(response)
    assert _undo_rows(html) == 2
    for key in ("first", "second"):
        assert f'name="steps" value="{key}" checked' in html
    assert 'value="third"' not in html  # dead-lettered: nothing to undo
    assert html.count("ticket.close") == 2
    assert html.index('value="second"') < html.index('value="first"')  # the order the undo runs in
    assert "irreversible" not in html
    assert 'name="reason"' in html and "required" in html


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "agent"])
def test_only_operators_may_request(failed, as_user, persona):
    client = as_user(persona)
    assert client.get(_request_page(failed)).status_code == 403
    response = client.post(_request_page(failed), {"steps": ["first", "second"], "reason": "undo"})
    assert response.status_code == 403
    assert not Compensation.objects.exists()


def test_a_request_without_a_reason_shows_the_error_and_creates_nothing(failed, as_user):
    response = as_user("operator").post(_request_page(failed), {"steps": ["first"], "reason": "  "})
    assert response.status_code == 400
    html = _html(response)
    assert "A reason is required." in html
    assert 'value="first" checked' in html and 'value="second" checked' not in html  # the choice is kept
    assert not Compensation.objects.exists()


def test_a_request_without_any_step_is_refused_not_widened_to_all(failed, as_user):
    response = as_user("operator").post(_request_page(failed), {"reason": "undo the lot"})
    assert response.status_code == 400
    html = _html(response)
    assert "Choose at least one step to compensate." in html
    assert ">undo the lot</textarea>" in html
    assert not Compensation.objects.exists()


def test_a_request_with_a_reason_creates_the_compensation_and_redirects(failed, as_user, desk):
    client = as_user("operator")
    response = client.post(_request_page(failed), {"steps": ["first", "second"], "reason": "incident cancelled"})
    comp = Compensation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == _page(comp)
    assert (comp.status, comp.requested_by.username, comp.reason) == ("REQUESTED", "operator", "incident cancelled")
    assert [item["compensates"] for item in comp.plan] == ["second", "first"]
    html = _html(client.get(response["Location"]))
    assert "Compensation requested" in html
    assert "Authorize</button>" not in html  # an operator does not decide
    assert closes_per_ticket(desk) == {}  # nothing runs before authorization


def test_a_subset_request_undoes_only_the_chosen_step(failed, as_user):
    as_user("operator").post(_request_page(failed), {"steps": ["first"], "reason": "only the first"})
    comp = Compensation.objects.get()
    assert [item["compensates"] for item in comp.plan] == ["first"]


def test_a_second_request_while_one_is_open_is_refused(requested, as_user):
    client = as_user("operator")
    page = _html(client.get(_request_page(requested.workflow)))
    assert f'href="{_page(requested)}"' in page and 'name="steps"' not in page
    response = client.post(_request_page(requested.workflow), {"steps": ["first"], "reason": "again"})
    assert response.status_code == 409
    assert "already has a compensation" in _html(response)
    assert Compensation.objects.count() == 1


# --- irreversible steps -----------------------------------------------------------


def test_irreversible_steps_are_shown_before_and_after_the_request(people, desk, as_user):
    workflow = failed_workflow(people, mixed_plan())
    client = as_user("operator")
    why = compensation.IRREVERSIBLE_WHY.format(action="email.send")
    form = _html(client.get(_request_page(workflow)))
    assert _undo_rows(form) == 2
    assert 'class="status s-irreversible">irreversible</span>' in form
    assert why in form

    response = client.post(_request_page(workflow), {"steps": ["open", "mail"], "reason": "undo"})
    comp = Compensation.objects.get()
    assert [i["key"] for i in comp.irreversible] == ["mail"]
    html = _html(client.get(response["Location"]))
    assert 'data-testid="irreversible"' in html
    assert "Irreversible: 1 step will not be undone" in html
    assert "These effects stay in place; handle them outside the system." in html
    assert "<code>mail</code> (email.send)" in html and why in html
    assert _undo_rows(html) == 1  # only the ticket is undone


# --- deciding -----------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["operator", "reviewer", "reviewer2", "auditor"])
def test_staff_may_read_the_compensation_page(requested, as_user, persona):
    response = as_user(persona).get(_page(requested))
    assert response.status_code == 200
    html = _html(response)
    assert 'data-testid="compensation-status">REQUESTED' in html
    assert "incident cancelled" in html and f'href="/workflows/{requested.workflow_id}/"' in html
    assert _undo_rows(html) == 2 and "Not created until authorized" in html


def test_agents_may_not_read_the_compensation_page(requested, as_user):
    """Agents' role reads no compensations: 403 for one and for the list (tests/api/test_read_side.py)."""
    assert as_user("agent").get(_page(requested)).status_code == 403
    assert as_user("agent").get(LIST).status_code == 403


def test_the_requester_cannot_authorize(failed, as_user):
    client = as_user("admin")  # operator and reviewer
    client.post(_request_page(failed), {"steps": ["first", "second"], "reason": "undo it"})
    comp = Compensation.objects.get()
    html = _html(client.get(_page(comp)))
    assert "Authorize</button>" not in html and "Decline</button>" not in html
    response = client.post(f"{_page(comp)}authorize", {"reason": "mine"})
    assert response.status_code == 302 and response["Location"] == _page(comp)
    assert "cannot be decided by the user who requested it" in _html(client.get(_page(comp)))
    _unchanged(comp)


@pytest.mark.parametrize("persona, status", [("operator", 403), ("auditor", 403), ("agent", 403)])
def test_non_reviewers_may_not_decide(requested, as_user, persona, status):
    """403 for who sees it but may not decide, and for an agent, whose role reads none."""
    client = as_user(persona)
    assert client.post(f"{_page(requested)}authorize", {}).status_code == status
    assert client.post(f"{_page(requested)}decline", {"reason": "no"}).status_code == status
    _unchanged(requested)


def test_a_second_reviewer_authorizes_and_the_page_follows_the_run(requested, as_user, desk):
    client = as_user("reviewer2")
    html = _html(client.get(_page(requested)))
    assert "Authorize</button>" in html and "Decline</button>" in html
    assert 'hx-trigger="every 2s"' not in html  # nothing runs yet

    response = client.post(f"{_page(requested)}authorize", {"reason": "agreed"})
    assert response.status_code == 302 and response["Location"] == _page(requested)
    requested.refresh_from_db()
    assert requested.status in ("RUNNING", "COMPENSATED")
    assert requested.authorized_by.username == "reviewer2"
    running = _html(client.get(_page(requested)))
    assert "Authorized: compensation of" in running
    assert 'hx-trigger="every 2s"' in running  # refreshes itself while it runs
    assert "Authorize</button>" not in running

    run_until(requested.workflow_id, "COMPENSATED")
    html = _html(client.get(_page(requested)))
    assert 'data-testid="compensation-status">COMPENSATED' in html
    assert 'hx-trigger="every 2s"' not in html
    undo_steps = list(requested.steps.all())
    assert len(undo_steps) == 2
    for step in undo_steps:
        assert f'data-testid="undo-operation-key">{step.operation_key}</code>' in html
    assert html.count('data-testid="undo-status">COMPLETE') == 2
    assert "reviewer2" in html and "agreed" in html
    assert sorted(closes_per_ticket(desk).values()) == [1, 1]


def test_a_failed_undo_points_to_its_dead_letter(requested, as_user, desk, people):
    desk.fault(mode="error", status=403, count=1)  # the first close is refused
    decide.authorize(requested, by=people["reviewer2"])
    run_until(requested.workflow_id, "COMPENSATION_FAILED")
    html = _html(as_user("operator").get(_page(requested)))
    assert 'data-testid="compensation-status">FAILED' in html
    assert 'href="/dead-letters/' in html and "An undo step stopped." in html


def test_decline_needs_a_reason(requested, as_user):
    client = as_user("reviewer2")
    response = client.post(f"{_page(requested)}decline", {"reason": " "})
    assert response.status_code == 302
    assert "A reason is required." in _html(client.get(_page(requested)))
    _unchanged(requested)

    client.post(f"{_page(requested)}decline", {"reason": "tickets are still needed"})
    requested.refresh_from_db()
    assert requested.status == "DECLINED"
    html = _html(client.get(_page(requested)))
    assert "by reviewer2" in html and "tickets are still needed" in html
    assert "Authorize</button>" not in html
    assert not requested.steps.exists()
    # Declined is settled: the operator may ask again.
    assert _request_page(requested.workflow) in _html(as_user("operator").get(f"/workflows/{requested.workflow_id}/"))


def test_htmx_decisions_return_the_live_partial(requested, as_user):
    response = as_user("reviewer2").post(f"{_page(requested)}authorize", {}, **HTMX)
    assert response.status_code == 200
    requested.refresh_from_db()
    assert requested.status == "RUNNING"
    html = _html(response)
    assert "<html" not in html and "<body" not in html
    assert 'data-testid="compensation-status">RUNNING' in html
    assert 'hx-trigger="every 2s"' in html


def test_htmx_refusal_is_shown_in_the_partial(failed, as_user):
    client = as_user("admin")
    client.post(_request_page(failed), {"steps": ["first"], "reason": "undo it"})
    comp = Compensation.objects.get()
    response = client.post(f"{_page(comp)}decline", {"reason": "changed my mind"}, **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html
    assert "cannot be decided by the user who requested it" in html
    _unchanged(comp)


def test_htmx_page_request_gets_only_the_live_partial(requested, as_user):
    response = as_user("auditor").get(_page(requested), **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html and 'data-testid="compensation-status">REQUESTED' in html
    assert "HX-Request" in response["Vary"]


def test_gets_on_decisions_are_not_allowed(requested, as_user):
    client = as_user("reviewer2")
    assert client.get(f"{_page(requested)}authorize").status_code == 405
    assert client.get(f"{_page(requested)}decline").status_code == 405


def test_unknown_compensation_is_not_found(as_user, people):
    assert as_user("reviewer").get("/compensations/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_posts_without_csrf_token_are_forbidden(requested, as_user):
    reviewer = as_user("reviewer2", enforce_csrf_checks=True)
    assert reviewer.post(f"{_page(requested)}authorize", {}).status_code == 403
    assert reviewer.post(f"{_page(requested)}decline", {"reason": "no"}).status_code == 403
    _unchanged(requested)
    operator = as_user("operator", enforce_csrf_checks=True)
    assert operator.post(_request_page(requested.workflow), {"steps": ["first"], "reason": "x"}).status_code == 403
    assert Compensation.objects.count() == 1


def test_hostile_reasons_are_escaped(failed, as_user):
    hostile = f"{SCRIPT}{ATTRIBUTE_BREAKOUT}"
    as_user("operator").post(_request_page(failed), {"steps": ["first"], "reason": hostile})
    comp = Compensation.objects.get()
    as_user("reviewer2").post(f"{_page(comp)}decline", {"reason": hostile})
    comp.refresh_from_db()
    assert (comp.reason, comp.decision_reason) == (hostile, hostile)
    for path in (_page(comp), f"/workflows/{failed.pk}/", f"{LIST}?status=all"):
        html = _html(as_user("reviewer").get(path))
        assert SCRIPT not in html and ATTRIBUTE_BREAKOUT not in html, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path


# --- the list of compensations awaiting a decision ----------------------------------


def test_reviewers_see_compensations_awaiting_a_decision_newest_first(people, desk, as_user, monkeypatch):
    older = compensation.request(failed_workflow(people, three_steps("a")), by=people["operator"], reason="older")
    newer = compensation.request(failed_workflow(people, three_steps("b")), by=people["operator"], reason="newer")
    client = as_user("reviewer")
    html = _html(client.get(LIST))
    assert html.count('data-testid="compensation-row"') == 2
    assert html.index(_page(newer)) < html.index(_page(older))
    assert 'href="/compensations/">Compensations</a>' in html

    monkeypatch.setattr(compensations, "PAGE_SIZE", 1)
    first = _html(client.get(LIST))
    assert _page(newer) in first and _page(older) not in first
    cursor = first.split("cursor=")[1].split('"')[0]
    second = _html(client.get(f"{LIST}?status=REQUESTED&cursor={cursor}", **HTMX))
    assert "<html" not in second and _page(older) in second and _page(newer) not in second

    decide.decline(older, by=people["reviewer2"], reason="no")
    monkeypatch.setattr(compensations, "PAGE_SIZE", 50)
    awaiting = _html(client.get(LIST))
    assert _page(newer) in awaiting and _page(older) not in awaiting
    assert _page(older) in _html(client.get(LIST, {"status": "DECLINED"}))


def test_bad_list_parameters_are_refused(as_user, people):
    client = as_user("reviewer")
    assert client.get(LIST, {"cursor": "garbage"}).status_code == 400
    assert client.get(LIST, {"status": "NOPE"}).status_code == 400
