"""Standing grants in the console: a reviewer grants (a bad condition shows
Cedar's message, escaped), a second reviewer authorizes one of an
irreversible action, a reviewer or operator revokes with a reason."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.seeing import Client
from workflows.models import AuditEvent, StandingGrant


@pytest.fixture
def as_user(people):
    def login(name):
        client = Client()
        client.force_login(people[name])
        return client

    return login


def form(**changes) -> dict:
    until = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    return {"agent": "agent", "action": "ticket.comment", "when": "true", "max_uses": "2", "until": until, **changes}


def test_grant_authorize_and_revoke_in_the_console(as_user):
    reviewer = as_user("reviewer")
    assert reviewer.post("/grants/", form()).status_code == 302
    grant = StandingGrant.objects.get()
    assert grant.status == "PENDING"
    page = reviewer.get("/grants/").content.decode()
    assert grant.basis in page and "Authorize" in page
    reviewer.post(f"/grants/{grant.pk}/authorize", {})
    grant.refresh_from_db()
    assert grant.status == "PENDING"  # the grantor may not
    as_user("reviewer2").post(f"/grants/{grant.pk}/authorize", {})
    grant.refresh_from_db()
    assert (grant.status, grant.authorized_by.get_username()) == ("ACTIVE", "reviewer2")
    as_user("operator").post(f"/grants/{grant.pk}/revoke", {"reason": "done with it"})
    grant.refresh_from_db()
    assert (grant.status, grant.revoke_reason) == ("REVOKED", "done with it")
    assert {"grant.created", "grant.authorized", "grant.revoked"} <= set(
        AuditEvent.objects.values_list("verb", flat=True)
    )


def test_a_bad_condition_is_shown_with_cedar_s_message_escaped(as_user):
    answer = as_user("reviewer").post("/grants/", form(when='resource.nope == "<b>x</b>"'))
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "attribute `nope`" in page and "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert not StandingGrant.objects.exists()


def test_only_people_read_the_page_and_only_reviewers_grant(as_user):
    assert as_user("agent").get("/grants/").status_code == 403
    assert as_user("auditor").get("/grants/").status_code == 200
    assert as_user("operator").post("/grants/", form()).status_code == 403
    assert not StandingGrant.objects.exists()
