"""The operators' dead-letter console: who sees what, filters, the replay
preview, replay and discard one by one or in bulk, and that every refusal
changes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.seeing import Client
from workflows import actions
from workflows.actions import ActionError
from workflows.engine import execution, outcomes, policy
from workflows.models import AuditEvent, DeadLetter, Step, Workflow
from workflows.operations import deadletters, plans
from workflows.web.views import dead_letters

HTMX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE_BREAKOUT = '"><img src=x onerror=alert(1)>'
LIST = "/dead-letters/"


@pytest.fixture
def as_user(people):
    def client_for(name, **client_options):
        client = Client(**client_options)
        client.force_login(people[name])
        return client

    return client_for


@pytest.fixture
def park(people):
    """Drive the first step of a fresh, approved workflow into DEAD_LETTERED
    with a classified, non-retryable failure, the way the worker would."""

    def park_one(
        key, *, action="ticket.create", args=None, failure_class="INVALID_ARGUMENTS", error="HTTP 400: bad", name=None
    ):
        body = {
            "name": name or f"Plan {key}",
            "submission_key": key,
            "steps": [{"key": "open", "action": action, "args": args or {"title": "Printer on fire"}}],
        }
        workflow = plans.submit(people["agent"], body).workflow
        decide.approve(workflow, by=people["reviewer"])
        step = execution.claim(workflow.pk)
        attempt = execution._request_attempt(step, step.fence)
        outcomes.record_failure(step, attempt, actions.get(step.action), ActionError(failure_class, error), step.fence)
        dead_letter = DeadLetter.objects.get(step=step)
        assert Step.objects.get(pk=step.pk).status == "DEAD_LETTERED"
        assert Workflow.objects.get(pk=workflow.pk).status == "FAILED"
        return dead_letter

    return park_one


@pytest.fixture
def entry(park):
    return park("plan-1")


def _page(dead_letter):
    return f"/dead-letters/{dead_letter.pk}/"


def _html(response):
    return response.content.decode()


def _rows(html):
    return html.count('data-testid="dead-letter-row"')


def _short(dead_letter):
    return str(dead_letter.pk)[:8]


def _unchanged(dead_letter):
    """The entry, its step and its workflow are still exactly as parked."""
    dead_letter.refresh_from_db()
    assert dead_letter.status == "OPEN"
    assert dead_letter.resolved_by is None
    assert Step.objects.get(pk=dead_letter.step_id).status == "DEAD_LETTERED"
    assert Workflow.objects.get(pk=dead_letter.workflow_id).status == "FAILED"
    assert not AuditEvent.objects.filter(
        workflow_id=dead_letter.workflow_id, verb__in=["step.replayed", "workflow.resumed", "dead_letter.discarded"]
    ).exists()


# --- who sees what ------------------------------------------------------------


@pytest.mark.parametrize("persona", ["operator", "auditor"])
def test_operators_and_auditors_see_the_list(entry, as_user, persona):
    response = as_user(persona).get(LIST)
    assert response.status_code == 200
    html = _html(response)
    assert _rows(html) == 1
    assert _short(entry) in html
    assert f'href="/workflows/{entry.workflow_id}/"' in html
    assert f'href="{_page(entry)}"' in html
    assert "INVALID_ARGUMENTS" in html
    assert 'href="/dead-letters/">Dead letters</a>' in html


@pytest.mark.parametrize("persona, sees", [("reviewer", False), ("agent", True)])
def test_reviewers_see_none_and_an_agent_its_own_as_through_the_api(entry, as_user, persona, sees):
    """As the API answers (tests/api/test_read_side.py): a reviewer's role reads
    no dead letters (403 for the list and the entry); the agent that submitted
    the workflow sees its dead letter."""
    client = as_user(persona)
    listing = client.get(LIST)
    if sees:
        assert listing.status_code == 200 and _page(entry) in _html(listing)
    else:
        assert listing.status_code == 403
    assert client.get(_page(entry)).status_code == (200 if sees else 403)
    assert 'href="/dead-letters/"' not in _html(client.get("/workflows/"))


def test_anonymous_users_are_sent_to_log_in(entry):
    for path in (LIST, _page(entry)):
        response = Client().get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/login/?next="), path
    response = Client().post(f"{_page(entry)}replay", {"reason": "drive-by"})
    assert response["Location"].startswith("/login/")
    _unchanged(entry)


def test_only_operators_get_checkboxes_and_bulk_buttons(entry, as_user):
    operator = _html(as_user("operator").get(LIST))
    assert f'name="ids" value="{entry.pk}"' in operator
    assert "Preview replay of selected</button>" in operator

    auditor = _html(as_user("auditor").get(LIST))
    assert 'name="ids"' not in auditor
    assert "Preview replay" not in auditor


# --- filters and paging ---------------------------------------------------------


@pytest.fixture
def two_kinds(park):
    invalid = park("invalid", action="ticket.create", failure_class="INVALID_ARGUMENTS")
    denied = park("denied", action="noop", args={"x": 1}, failure_class="PERMISSION_DENIED")
    return invalid, denied


def test_filters_narrow_the_rows(two_kinds, as_user):
    invalid, denied = two_kinds
    client = as_user("operator")
    assert _rows(_html(client.get(LIST))) == 2

    by_class = _html(client.get(LIST, {"failure_class": "PERMISSION_DENIED"}))
    assert _rows(by_class) == 1
    assert _short(denied) in by_class and _short(invalid) not in by_class

    by_action = _html(client.get(LIST, {"action": "ticket.create"}))
    assert _rows(by_action) == 1
    assert _short(invalid) in by_action and _short(denied) not in by_action

    assert _rows(_html(client.get(LIST, {"action": "noop", "failure_class": "INVALID_ARGUMENTS"}))) == 0


def test_action_filter_offers_the_actions_present(two_kinds, as_user):
    html = _html(as_user("operator").get(LIST))
    assert '<option value="noop">noop</option>' in html
    assert '<option value="ticket.create">ticket.create</option>' in html
    assert '<option value="ticket.close">' not in html


def test_age_filter_keeps_only_older_entries(two_kinds, as_user):
    invalid, denied = two_kinds
    DeadLetter.objects.filter(pk=invalid.pk).update(created_at=timezone.now() - timedelta(hours=2))
    html = _html(as_user("operator").get(LIST, {"age": "1h"}))
    assert _rows(html) == 1
    assert _short(invalid) in html and _short(denied) not in html


def test_status_filter_defaults_to_open(two_kinds, as_user, people):
    invalid, denied = two_kinds
    deadletters.discard(denied, by=people["operator"], reason="duplicate of another ticket")
    client = as_user("operator")
    open_only = _html(client.get(LIST))
    assert _rows(open_only) == 1 and _short(invalid) in open_only
    discarded = _html(client.get(LIST, {"status": "DISCARDED"}))
    assert _rows(discarded) == 1 and _short(denied) in discarded
    assert 'name="ids"' not in discarded  # only open entries can be picked for replay
    assert _rows(_html(client.get(LIST, {"status": "all"}))) == 2


def test_htmx_filter_request_gets_only_the_rows(two_kinds, as_user):
    invalid, denied = two_kinds
    response = as_user("operator").get(LIST, {"failure_class": "PERMISSION_DENIED"}, **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html
    assert '<form method="get"' not in html
    assert _rows(html) == 1 and _short(denied) in html
    # The bulk form inside the partial carries the filter it was rendered for.
    assert '<input type="hidden" name="failure_class" value="PERMISSION_DENIED">' in html
    assert "HX-Request" in response["Vary"]


def test_filter_form_works_without_javascript(entry, as_user):
    html = _html(as_user("operator").get(LIST))
    assert '<form method="get" action="/dead-letters/"' in html
    assert 'hx-push-url="true"' in html
    for field in ("status", "action", "failure_class", "age"):
        assert f'<label for="id_{field}">' in html


def test_list_pages_by_keyset_newest_first(park, as_user, monkeypatch):
    monkeypatch.setattr(dead_letters, "PAGE_SIZE", 2)
    entries = [park(f"plan-{n}") for n in range(3)]
    client = as_user("operator")
    first = _html(client.get(LIST))
    assert _rows(first) == 2
    assert _short(entries[2]) in first and _short(entries[1]) in first
    cursor = first.split("cursor=")[1].split('"')[0]
    second = _html(client.get(LIST, {"cursor": cursor}, **HTMX))
    assert _rows(second) == 1 and _short(entries[0]) in second
    assert client.get(LIST, {"cursor": "not-a-cursor"}).status_code == 400


# --- detail -----------------------------------------------------------------------


def test_detail_shows_trace_and_replay_preview(entry, as_user):
    html = _html(as_user("operator").get(_page(entry)))
    step = Step.objects.get(pk=entry.step_id)
    assert "HTTP 400: bad" in html
    assert "INVALID_ARGUMENTS" in html
    assert f'<code data-testid="operation-key">{step.operation_key}</code>' in html
    assert "Printer on fire" in html
    for check in (
        "action available",
        "action enabled",
        "workflow not cancelled",
        "deadline not passed",
        "plan as approved",
        "approvals still valid",
    ):
        assert check in html
    assert html.count('data-testid="check-result">✓ pass<') == 6
    assert "Will run</strong>" in html
    assert "started " in html and " ms" in html  # timings of the failed attempt
    assert "Replay</button>" in html and "Discard</button>" in html
    assert '<label for="replay-reason">' in html and '<label for="discard-reason">' in html


def test_preview_shows_a_failing_check(entry, as_user, people):
    policy.update("ticket.create", by=people["admin"], enabled=False)
    html = _html(as_user("operator").get(_page(entry)))
    assert html.count('data-testid="check-result">✗ fail<') == 1
    assert "switched off" in html
    assert "Will be refused:</strong>" in html


def test_auditor_sees_the_detail_read_only(entry, as_user):
    html = _html(as_user("auditor").get(_page(entry)))
    assert "HTTP 400: bad" in html
    assert "Replay</button>" not in html and "Discard</button>" not in html
    assert "Read-only" in html


# --- replay and discard -------------------------------------------------------------


def test_replay_with_a_reason_puts_the_step_back_in_line(entry, as_user):
    client = as_user("operator")
    response = client.post(f"{_page(entry)}replay", {"reason": "desk fixed the validation bug"})
    assert response.status_code == 302
    assert response["Location"] == _page(entry)

    entry.refresh_from_db()
    assert entry.status == "REPLAYED"
    assert entry.resolved_by.username == "operator"
    assert entry.resolution_reason == "desk fixed the validation bug"
    step = Step.objects.get(pk=entry.step_id)
    assert step.status == "PENDING"
    assert step.operation_key == f"{entry.workflow_id}:open"
    assert Workflow.objects.get(pk=entry.workflow_id).status == "RUNNING"
    event = AuditEvent.objects.get(verb="step.replayed", object_id=str(step.pk))
    assert event.actor == "operator"
    assert event.data["reason"] == "desk fixed the validation bug"
    assert event.data["operation_key"] == step.operation_key

    page = _html(client.get(response["Location"]))
    assert "Replayed: open" in page
    assert 'data-testid="dead-letter-status">REPLAYED<' in page
    assert "Replay</button>" not in page


def test_replay_with_htmx_swaps_the_detail(entry, as_user):
    response = as_user("operator").post(f"{_page(entry)}replay", {"reason": "retry now"}, **HTMX)
    assert response.status_code == 200
    html = _html(response)
    assert "<html" not in html and "← Dead letters" not in html
    assert "Replayed: open" in html
    assert 'data-testid="dead-letter-status">REPLAYED<' in html
    assert DeadLetter.objects.get(pk=entry.pk).status == "REPLAYED"


@pytest.mark.parametrize("reason", ["", "   "])
def test_replay_without_a_reason_changes_nothing(entry, as_user, reason):
    client = as_user("operator")
    response = client.post(f"{_page(entry)}replay", {"reason": reason})
    assert response.status_code == 302
    assert "A reason is required." in _html(client.get(_page(entry)))
    _unchanged(entry)

    swapped = client.post(f"{_page(entry)}replay", {"reason": reason}, **HTMX)
    assert swapped.status_code == 200
    assert "A reason is required." in _html(swapped)
    _unchanged(entry)


@pytest.mark.parametrize("persona, status", [("auditor", 403), ("reviewer", 403), ("agent", 403)])
def test_only_operators_can_replay_or_discard(entry, as_user, persona, status):
    """403 for who sees it (the agent its own), and for a reviewer, whose role reads none."""
    client = as_user(persona)
    for verb in ("replay", "discard"):
        assert client.post(f"{_page(entry)}{verb}", {"reason": "I insist"}).status_code == status
        assert client.post(f"{_page(entry)}{verb}", {"reason": "I insist"}, **HTMX).status_code == status
    _unchanged(entry)


def test_discard_with_a_reason_closes_the_entry(entry, as_user):
    client = as_user("operator")
    response = client.post(f"{_page(entry)}discard", {"reason": "ticket filed by hand"})
    assert response.status_code == 302
    entry.refresh_from_db()
    assert entry.status == "DISCARDED"
    assert entry.resolution_reason == "ticket filed by hand"
    assert Step.objects.get(pk=entry.step_id).status == "DEAD_LETTERED"
    event = AuditEvent.objects.get(verb="dead_letter.discarded", object_id=str(entry.pk))
    assert event.data == {"reason": "ticket filed by hand"}
    assert "Discarded: open" in _html(client.get(_page(entry)))


def test_discard_without_a_reason_changes_nothing(entry, as_user):
    client = as_user("operator")
    client.post(f"{_page(entry)}discard", {"reason": ""})
    assert "A reason is required." in _html(client.get(_page(entry)))
    _unchanged(entry)


def test_replaying_a_resolved_entry_is_refused(entry, as_user):
    client = as_user("operator")
    client.post(f"{_page(entry)}replay", {"reason": "first"})
    replays = AuditEvent.objects.filter(verb="step.replayed").count()
    assert replays == 1

    response = client.post(f"{_page(entry)}replay", {"reason": "second"}, **HTMX)
    assert response.status_code == 200
    assert "This dead letter was already resolved." in _html(response)
    entry.refresh_from_db()
    assert entry.resolution_reason == "first"
    assert AuditEvent.objects.filter(verb="step.replayed").count() == replays


def test_get_on_replay_is_not_allowed(entry, as_user):
    client = as_user("operator")
    assert client.get(f"{_page(entry)}replay").status_code == 405
    assert client.get(f"{_page(entry)}discard").status_code == 405
    assert client.get("/dead-letters/bulk/replay").status_code == 405
    _unchanged(entry)


# --- bulk ----------------------------------------------------------------------------


def test_bulk_preview_lists_exactly_the_selected_entries(park, as_user):
    picked = [park("a"), park("b")]
    left = park("c")
    response = as_user("operator").post(
        "/dead-letters/bulk/preview",
        {
            "scope": "selected",
            "ids": [str(e.pk) for e in picked],
        },
    )
    assert response.status_code == 200
    html = _html(response)
    assert html.count('data-testid="bulk-preview-entry"') == 2
    for dead_letter in picked:
        assert f'<input type="hidden" name="ids" value="{dead_letter.pk}">' in html
        assert Step.objects.get(pk=dead_letter.step_id).operation_key in html
    assert str(left.pk) not in html
    assert Step.objects.get(pk=left.step_id).operation_key not in html
    assert "Replay 2</button>" in html
    assert '<label for="bulk-reason">' in html
    assert html.count('data-testid="check-result">✓ pass<') == 12


def test_bulk_preview_by_filter_takes_only_matching_entries(two_kinds, as_user):
    invalid, denied = two_kinds
    html = _html(
        as_user("operator").post(
            "/dead-letters/bulk/preview",
            {
                "scope": "filter",
                "failure_class": "PERMISSION_DENIED",
                "action": "",
                "age": "",
                "ids": [str(invalid.pk)],  # a ticked row does not count when the filter is chosen
            },
        )
    )
    assert html.count('data-testid="bulk-preview-entry"') == 1
    assert f'name="ids" value="{denied.pk}"' in html
    assert str(invalid.pk) not in html


@pytest.mark.parametrize("scope", ["selected", "filter"])
def test_bulk_preview_refuses_an_empty_selection(entry, as_user, scope):
    client = as_user("operator")
    response = client.post("/dead-letters/bulk/preview", {"scope": scope, "action": "", "failure_class": ""})
    assert response.status_code == 302
    assert response["Location"] == LIST
    assert "Choose dead letters by id or by a filter" in _html(client.get(LIST))
    _unchanged(entry)


def test_bulk_preview_refuses_an_invalid_filter(entry, as_user):
    client = as_user("operator")
    response = client.post("/dead-letters/bulk/preview", {"scope": "filter", "failure_class": "EVERYTHING"})
    assert response.status_code == 302
    assert "The filter is not valid" in _html(client.get(LIST))


def test_bulk_is_for_operators_only(entry, as_user):
    client = as_user("auditor")
    assert client.post("/dead-letters/bulk/preview", {"ids": [str(entry.pk)]}).status_code == 403
    assert client.post("/dead-letters/bulk/replay", {"ids": [str(entry.pk)], "reason": "x"}).status_code == 403
    _unchanged(entry)


def test_bulk_replay_replays_the_selected_entries_only(park, as_user):
    picked = [park("a"), park("b")]
    left = park("c")
    client = as_user("operator")
    response = client.post(
        "/dead-letters/bulk/replay",
        {
            "ids": [str(e.pk) for e in picked],
            "reason": "desk is back",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == LIST
    for dead_letter in picked:
        dead_letter.refresh_from_db()
        assert dead_letter.status == "REPLAYED"
        assert dead_letter.resolution_reason == "desk is back"
        assert Step.objects.get(pk=dead_letter.step_id).status == "PENDING"
    _unchanged(left)
    assert AuditEvent.objects.filter(verb="step.replayed").count() == 2
    assert "Replayed 2, refused 0." in _html(client.get(LIST))


def test_bulk_replay_reports_refusals_with_reasons(park, as_user, people):
    fresh, resolved = park("a"), park("b")
    deadletters.replay(resolved, by=people["operator"], reason="earlier")
    client = as_user("operator")
    client.post("/dead-letters/bulk/replay", {"ids": [str(fresh.pk), str(resolved.pk)], "reason": "again"})
    html = _html(client.get(LIST))
    assert "Replayed 1, refused 1." in html
    assert f"Refused 1 ({_short(resolved)}): It is no longer open." in html
    assert DeadLetter.objects.get(pk=fresh.pk).status == "REPLAYED"
    assert DeadLetter.objects.get(pk=resolved.pk).resolution_reason == "earlier"


def test_bulk_replay_reports_a_policy_refusal(park, as_user, people):
    allowed, switched_off = park("a"), park("b", action="noop", args={"x": 1})
    policy.update("noop", by=people["admin"], enabled=False)
    client = as_user("operator")
    client.post("/dead-letters/bulk/replay", {"ids": [str(allowed.pk), str(switched_off.pk)], "reason": "go"})
    html = _html(client.get(LIST))
    assert "Replayed 1, refused 1." in html
    assert "Current policy does not allow this replay: action enabled" in html
    _unchanged(switched_off)


def test_bulk_replay_without_a_reason_changes_nothing(entry, as_user):
    response = as_user("operator").post("/dead-letters/bulk/replay", {"ids": [str(entry.pk)], "reason": " "})
    assert response.status_code == 200
    html = _html(response)
    assert "A reason is required." in html
    assert "Replay 1</button>" in html
    _unchanged(entry)


def test_bulk_replay_refuses_an_empty_selection(entry, as_user):
    client = as_user("operator")
    response = client.post("/dead-letters/bulk/replay", {"reason": "everything please"})
    assert response.status_code == 302
    assert "Choose dead letters by id or by a filter" in _html(client.get(LIST))
    _unchanged(entry)


# --- untrusted text and CSRF ------------------------------------------------------------


def test_hostile_text_is_escaped(park, as_user):
    hostile = park(
        "hostile",
        action="noop",
        args={"title": SCRIPT, "note": ATTRIBUTE_BREAKOUT},
        error=f"HTTP 400: {SCRIPT}{ATTRIBUTE_BREAKOUT}",
        name=f"{SCRIPT}{ATTRIBUTE_BREAKOUT}",
    )
    client = as_user("operator")
    for response in (
        client.get(LIST),
        client.get(LIST, **HTMX),
        client.get(_page(hostile)),
        client.post(f"{_page(hostile)}replay", {"reason": ""}, **HTMX),
        client.post("/dead-letters/bulk/preview", {"scope": "selected", "ids": [str(hostile.pk)]}),
    ):
        html = _html(response)
        assert SCRIPT not in html
        assert "<img" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_posts_without_csrf_token_are_forbidden(entry, as_user):
    client = as_user("operator", enforce_csrf_checks=True)
    for path, data in (
        (f"{_page(entry)}replay", {"reason": "forged"}),
        (f"{_page(entry)}discard", {"reason": "forged"}),
        ("/dead-letters/bulk/preview", {"scope": "selected", "ids": [str(entry.pk)]}),
        ("/dead-letters/bulk/replay", {"ids": [str(entry.pk)], "reason": "forged"}),
    ):
        assert client.post(path, data).status_code == 403, path
    _unchanged(entry)
