"""Action policies in the console: operators see each action's limits and
steps in flight and change them; a tightening applies, a loosening waits for
a second operator, who authorizes or declines it; auditors only look."""

import pytest
from django.contrib.auth.models import Group, User

from tests.support.seeing import Client
from workflows import roles
from workflows.engine import policy
from workflows.models import AuditEvent, PolicyChange


@pytest.fixture
def as_user(people):
    operator2 = User.objects.create_user("operator2", password="x")
    operator2.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    users = {**people, "operator2": operator2}
    clients = {}

    def login(name):
        if name not in clients:
            clients[name] = Client()
            clients[name].force_login(users[name])
        return clients[name]

    return login


def form(rules, **changes):
    values = {
        "risk": rules.risk,
        "approvals_required": rules.approvals_required,
        "approval_ttl_seconds": rules.approval_ttl_seconds or "",
        "max_attempts": rules.max_attempts,
        "max_in_flight": rules.max_in_flight or "",
        "rate_per_second": rules.rate_per_second or "",
        "version": rules.version,
        "reason": "because",
    }
    if rules.enabled:
        values["enabled"] = "on"
    if rules.chat_decisions:
        values["chat_decisions"] = "on"
    values.update(changes)
    return {name: value for name, value in values.items() if value is not None}


def test_operators_see_each_actions_limits_and_in_flight(as_user):
    policy.update("ticket.create", by="test", max_in_flight=7)
    page = as_user("operator").get("/actions/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "ticket.create" in text and "0 / 7" in text and "noop" in text
    assert as_user("auditor").get("/actions/ticket.create/policy").status_code == 200
    # A reviewer's role reads no policies: the list and a policy are 403 (tests/api/test_read_side.py).
    assert as_user("reviewer").get("/actions/").status_code == 403
    assert as_user("reviewer").get("/actions/ticket.create/policy").status_code == 403
    assert as_user("operator").get("/actions/no.such/policy").status_code == 404


def test_a_tightening_from_the_form_applies(as_user):
    rules = policy.policy_for("ticket.create")
    answer = as_user("operator").post("/actions/ticket.create/policy", form(rules, max_in_flight="3"))
    assert answer.status_code == 302
    current = policy.policy_for("ticket.create")
    assert (current.max_in_flight, current.version) == (3, rules.version + 1)
    assert "Applied" in as_user("operator").get(answer.url).content.decode()


def test_a_loosening_waits_and_a_second_operator_authorizes_it(as_user):
    policy.update("ticket.create", by="test", max_in_flight=3)
    rules = policy.policy_for("ticket.create")
    answer = as_user("operator").post("/actions/ticket.create/policy", form(rules, max_in_flight=""))
    page = as_user("operator").get(answer.url).content.decode()
    assert "waiting for a second operator" in page
    assert policy.policy_for("ticket.create").max_in_flight == 3
    change = PolicyChange.objects.get()
    assert 'action="/policy-changes/' not in page  # the requester gets no decision buttons
    assert as_user("operator").post(f"/policy-changes/{change.pk}/authorize").status_code == 302
    assert PolicyChange.objects.get().status == "PENDING"
    other = as_user("operator2").get("/actions/ticket.create/policy").content.decode()
    assert f'action="/policy-changes/{change.pk}/authorize"' in other
    as_user("operator2").post(f"/policy-changes/{change.pk}/authorize", {"reason": "ok"})
    assert policy.policy_for("ticket.create").max_in_flight is None
    assert PolicyChange.objects.get().status == "APPLIED"
    assert AuditEvent.objects.filter(verb="policy_change.authorized", actor="operator2").exists()


def test_a_second_operator_declines_over_htmx(as_user):
    policy.update("noop", by="test", enabled=False)
    rules = policy.policy_for("noop")
    as_user("operator").post("/actions/noop/policy", form(rules, enabled="on"))
    change = PolicyChange.objects.get()
    partial = as_user("operator2").post(
        f"/policy-changes/{change.pk}/decline", {"reason": "not yet"}, HTTP_HX_REQUEST="true"
    )
    assert partial.status_code == 200
    assert "<html" not in partial.content.decode() and "No change is waiting" in partial.content.decode()
    assert PolicyChange.objects.get().status == "DECLINED"
    assert policy.policy_for("noop").enabled is False


def test_bad_values_redisplay_the_form_and_change_nothing(as_user):
    rules = policy.policy_for("ticket.create")
    for bad in ({"max_in_flight": "0"}, {"rate_per_second": "nan"}, {"max_attempts": "lots"}, {"reason": ""}):
        answer = as_user("operator").post("/actions/ticket.create/policy", form(rules, **bad))
        assert answer.status_code == 400, bad
    assert policy.policy_for("ticket.create").version == rules.version
    assert not PolicyChange.objects.exists()


def test_a_form_sent_against_an_older_version_changes_nothing(as_user):
    rules = policy.policy_for("ticket.create")
    policy.update("ticket.create", by="test", max_attempts=2)
    answer = as_user("operator").post("/actions/ticket.create/policy", form(rules, max_in_flight="4"))
    assert answer.status_code == 409
    current = policy.policy_for("ticket.create")
    assert (current.max_in_flight, current.max_attempts) == (None, 2)


def test_text_is_escaped(as_user):
    rules = policy.policy_for("ticket.create")
    as_user("operator").post(
        "/actions/ticket.create/policy", form(rules, max_attempts="9", reason="<script>alert(1)</script>")
    )
    page = as_user("operator2").get("/actions/ticket.create/policy").content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_auditors_cannot_change_or_decide(as_user):
    rules = policy.policy_for("ticket.create")
    assert as_user("auditor").post("/actions/ticket.create/policy", form(rules, enabled=None)).status_code == 403
    assert policy.policy_for("ticket.create").enabled is True


def test_the_admin_cannot_change_a_policy_around_the_second_operator(as_user):
    rules = policy.policy_for("ticket.create")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="x"))
    assert admin.get(f"/admin/workflows/actionpolicy/{rules.pk}/change/").status_code == 200  # it may look
    answer = admin.post(
        f"/admin/workflows/actionpolicy/{rules.pk}/change/",
        {"action": "ticket.create", "enabled": "on", "risk": "LOW", "approvals_required": 0, "max_attempts": 50},
    )
    assert answer.status_code == 403
    assert policy.policy_for("ticket.create").version == rules.version
