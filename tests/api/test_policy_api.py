"""Action policies over the API (docs/explanation/concurrency.md#effects-in-flight): operators tighten alone, a
loosening waits for a second operator, auditors read, bad input is a 400
that changes nothing."""

import pytest
from django.contrib.auth.models import Group, User

from tests.support.api import ApiClient
from workflows import roles
from workflows.engine import policy
from workflows.models import ActionPolicy, AuditEvent, PolicyChange


@pytest.fixture
def operator2(people):
    user = User.objects.create_user("operator2", password="x")
    user.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return ApiClient(user)


def version(action="ticket.create") -> int:
    return policy.policy_for(action).version


def test_get_shows_policy_limits_in_flight_and_pending_requests(api):
    policy.policy_for("ticket.create")
    body = api["operator"].get("/actions/ticket.create/policy").json()
    assert body["action"] == "ticket.create"
    assert (body["max_in_flight"], body["rate_per_second"], body["in_flight"], body["paused_until"]) == (
        None,
        None,
        0,
        None,
    )
    assert body["pending"] == []
    assert api["auditor"].get("/actions/ticket.create/policy").status_code == 200
    # A role that does not read policies gets 403, as in the console (tests/api/test_read_side.py).
    assert api["agent"].get("/actions/ticket.create/policy").status_code == 403
    assert api["reviewer"].get("/actions/ticket.create/policy").status_code == 403


def test_tightening_applies_at_once_as_a_new_audited_version(api):
    before = version()
    answer = api["operator"].patch(
        "/actions/ticket.create/policy", {"max_in_flight": 4, "rate_per_second": 2.5, "reason": "desk is struggling"}
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["max_in_flight"], body["rate_per_second"], body["version"]) == (4, 2.5, before + 1)
    event = AuditEvent.objects.filter(verb="policy.changed").latest("id")
    assert event.actor == "operator"
    assert event.data["changed"] == {"max_in_flight": 4, "rate_per_second": 2.5}
    assert event.data["previous"] == {"max_in_flight": None, "rate_per_second": None}
    assert event.data["reason"] == "desk is struggling"


def test_loosening_waits_for_a_second_operator_who_applies_it(api, operator2):
    api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 2, "reason": "tighten"})
    before = version()
    answer = api["operator"].patch("/actions/ticket.create/policy", {"max_in_flight": 10, "reason": "desk scaled"})
    assert answer.status_code == 202, answer.content
    request = answer.json()
    assert (request["status"], request["changes"], request["base_version"]) == (
        "PENDING",
        {"max_in_flight": 10},
        before,
    )
    assert policy.policy_for("ticket.create").max_in_flight == 2  # nothing applied yet
    shown = api["auditor"].get("/actions/ticket.create/policy").json()
    assert [p["id"] for p in shown["pending"]] == [request["id"]]
    decided = operator2.post(f"/policy-changes/{request['id']}/authorize", {"reason": "checked the desk"})
    assert decided.status_code == 200, decided.content
    assert (decided.json()["status"], decided.json()["decided_by"]) == ("APPLIED", "operator2")
    current = policy.policy_for("ticket.create")
    assert (current.max_in_flight, current.version) == (10, before + 1)
    verbs = list(AuditEvent.objects.filter(verb__startswith="policy").order_by("id").values_list("verb", "actor"))
    assert verbs[-3:] == [
        ("policy_change.requested", "operator"),
        ("policy.changed", "operator2"),
        ("policy_change.authorized", "operator2"),
    ]
    assert operator2.post(f"/policy-changes/{request['id']}/authorize", {}).status_code == 409


def test_a_change_that_mixes_tightening_and_loosening_is_a_loosening(api):
    api["operator"].patch("/actions/ticket.create/policy", {"max_attempts": 3, "reason": "fewer"})
    answer = api["operator"].patch(
        "/actions/ticket.create/policy", {"enabled": False, "max_attempts": 9, "reason": "mixed"}
    )
    assert answer.status_code == 202
    current = policy.policy_for("ticket.create")
    assert (current.enabled, current.max_attempts) == (True, 3)


def test_removing_a_limit_or_re_enabling_is_a_loosening(api):
    api["operator"].patch("/actions/ticket.create/policy", {"rate_per_second": 1, "enabled": False, "reason": "r"})
    assert (
        api["operator"].patch("/actions/ticket.create/policy", {"rate_per_second": None, "reason": "r"}).status_code
        == 202
    )
    assert api["operator"].patch("/actions/ticket.create/policy", {"enabled": True, "reason": "r"}).status_code == 202
    assert (
        api["operator"]
        .patch(
            "/actions/ticket.create/policy",
            {"approvals_required": 3, "risk": "HIGH", "approval_ttl_seconds": 600, "reason": "r"},
        )
        .status_code
        == 200
    )
    for loosen in (
        {"approvals_required": 2},
        {"risk": "LOW"},
        {"approval_ttl_seconds": None},
        {"approval_ttl_seconds": 601},
    ):
        assert api["operator"].patch("/actions/ticket.create/policy", {**loosen, "reason": "r"}).status_code == 202, (
            loosen
        )


def test_the_requester_cannot_decide_their_own_request(api):
    api["operator"].patch("/actions/ticket.create/policy", {"enabled": False, "reason": "incident"})
    request = api["operator"].patch("/actions/ticket.create/policy", {"enabled": True, "reason": "over"}).json()
    for verb in ("authorize", "decline"):
        answer = api["operator"].post(f"/policy-changes/{request['id']}/{verb}", {"reason": "me"})
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "forbidden"
    # A reviewer's role does not read policy changes: 403 (tests/api/test_read_side.py).
    assert api["reviewer"].post(f"/policy-changes/{request['id']}/authorize", {}).status_code == 403
    assert PolicyChange.objects.get(pk=request["id"]).status == "PENDING"
    assert policy.policy_for("ticket.create").enabled is False


def test_a_request_made_stale_by_a_later_change_is_refused(api, operator2):
    request = api["operator"].patch("/actions/ticket.create/policy", {"max_attempts": 8, "reason": "more"}).json()
    api["operator"].patch("/actions/ticket.create/policy", {"enabled": False, "reason": "incident"})
    before = version()
    answer = operator2.post(f"/policy-changes/{request['id']}/authorize", {})
    assert answer.status_code == 409
    assert "changed since" in answer.json()["error"]["message"]
    current = policy.policy_for("ticket.create")
    assert (current.max_attempts, current.version) == (5, before)
    declined = operator2.post(f"/policy-changes/{request['id']}/decline", {"reason": "stale"})
    assert declined.json()["status"] == "DECLINED"


def test_a_patch_against_another_version_changes_nothing(api):
    before = version()
    answer = api["operator"].patch(
        "/actions/ticket.create/policy", {"enabled": False, "reason": "r", "version": before - 1}
    )
    assert answer.status_code == 409
    assert (version(), policy.policy_for("ticket.create").enabled) == (before, True)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": "3"}, "max_in_flight"),
        ({"max_in_flight": True}, "max_in_flight"),
        ({"rate_per_second": 0}, "rate_per_second"),
        ({"rate_per_second": -1.5}, "rate_per_second"),
        ({"rate_per_second": 1e300}, "rate_per_second"),
        ({"approvals_required": 0}, "approvals_required"),
        ({"max_attempts": None}, "max_attempts"),
        ({"risk": "EXTREME"}, "risk"),
        ({"enabled": None}, "enabled"),
        ({"version": 1, "fence": 3}, "fence"),
    ],
)
def test_bad_values_are_a_400_naming_the_field_and_change_nothing(api, body, field):
    before = version()
    answer = api["operator"].patch("/actions/ticket.create/policy", {**body, "reason": "r"})
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"]
    assert version() == before
    assert not PolicyChange.objects.exists()


def test_a_reason_is_required_and_credentials_in_it_are_refused(api):
    before = version()
    assert api["operator"].patch("/actions/ticket.create/policy", {"enabled": False}).status_code == 400
    assert api["operator"].patch("/actions/ticket.create/policy", {"enabled": False, "reason": " "}).status_code == 400
    leaked = api["operator"].patch(
        "/actions/ticket.create/policy",
        {"enabled": False, "reason": "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"},
    )
    assert leaked.status_code == 400
    assert version() == before


def test_unknown_action_is_a_404_and_others_may_not_patch(api):
    assert api["operator"].get("/actions/no.such/policy").status_code == 404
    assert api["operator"].patch("/actions/no.such/policy", {"enabled": False, "reason": "r"}).status_code == 404
    assert not ActionPolicy.objects.filter(action="no.such").exists()
    for name in ("auditor", "reviewer", "agent"):
        assert api[name].patch("/actions/ticket.create/policy", {"enabled": False, "reason": "r"}).status_code == 403
    assert api["operator"].post("/policy-changes/00000000-0000-0000-0000-000000000000/authorize", {}).status_code == 404
