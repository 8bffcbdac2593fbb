"""Who did it, precisely (docs/explanation/teams.md#teams): each event a request writes for its
own actor records the identity provider's subject and issuer (SSO), the API
token (agents) and the client address, X-Forwarded-For believed only from
TRUSTED_PROXIES; the fields are hashed into the chain, older events without
them still verify, and the audit page and exports show them."""

import json
from datetime import datetime

import pytest
from django.db import transaction
from django.test import RequestFactory

from tests.support import deciding as decide
from tests.support.audit import streamed, tamper
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows.audit import identity, journal, keys
from workflows.models import AuditEvent
from workflows.operations import plans, tokens
from workflows.web.identity import SSO_SESSION_KEY, client_address

ISSUER = "https://id.example.com"


@pytest.mark.parametrize(
    "trusted, peer, forwarded, client",
    [
        ([], "203.0.113.7", "198.51.100.1", "203.0.113.7"),  # not from a trusted proxy: the header is ignored
        (["10.0.0.0/8"], "10.1.2.3", "198.51.100.1", "198.51.100.1"),
        (
            ["10.0.0.0/8"],
            "10.1.2.3",
            "6.6.6.6, 198.51.100.1",
            "198.51.100.1",
        ),  # the client's own prefix is not believed
        (["10.0.0.0/8"], "10.1.2.3", "198.51.100.1, 10.9.9.9", "198.51.100.1"),  # through two trusted proxies
        (["10.0.0.0/8"], "10.1.2.3", "", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "garbage", "10.1.2.3"),
        (["10.0.0.0/8"], "10.1.2.3", "198.51.100.1, garbage", "10.1.2.3"),
        (["10.0.0.1/32"], "10.0.0.2", "198.51.100.1", "10.0.0.2"),
        (["2001:db8::/32"], "2001:db8::1", "2001:db8:ffff::1, 2a00::5", "2a00::5"),
    ],
)
def test_the_client_address_believes_forwarded_for_only_from_trusted_proxies(
    settings, trusted, peer, forwarded, client
):
    settings.TRUSTED_PROXIES = trusted
    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == client


def test_an_agents_events_name_its_token_and_address(people, settings):
    settings.TRUSTED_PROXIES = ["127.0.0.1"]
    token = tokens.issue(people["agent"])
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = agent.post(
        "/api/v1/workflows", ticket_plan("who"), content_type="application/json", HTTP_X_FORWARDED_FOR="198.51.100.20"
    )
    assert response.status_code == 201, response.content
    event = AuditEvent.objects.filter(actor="agent").latest("id")
    assert (event.token_id, event.client_address, event.subject, event.issuer) == (token[:10], "198.51.100.20", "", "")
    assert tokens.authenticate(token) and token[:10].startswith(tokens.PREFIX)


def test_a_local_users_events_carry_the_address_only(people):
    workflow = plans.submit(people["agent"], ticket_plan("local")).workflow
    client = Client(REMOTE_ADDR="192.0.2.44")
    assert client.login(username="reviewer", password=PASSWORD)
    client.post(f"/workflows/{workflow.pk}/approve", {"comment": "ok"}, REMOTE_ADDR="192.0.2.44")
    event = AuditEvent.objects.filter(actor="reviewer").latest("id")
    assert (event.actor, event.client_address, event.subject, event.token_id) == ("reviewer", "192.0.2.44", "", "")


def test_an_sso_users_events_carry_subject_and_issuer(people):
    workflow = plans.submit(people["agent"], ticket_plan("sso")).workflow
    client = Client()
    client.force_login(people["reviewer"])
    session = client.session
    session[SSO_SESSION_KEY] = {"iss": ISSUER, "sub": "00u1a2b3c", "groups": ["idp-reviewers"]}
    session.save()
    client.post(f"/workflows/{workflow.pk}/approve", {"comment": "ok"})
    event = AuditEvent.objects.filter(actor="reviewer").latest("id")
    assert (event.subject, event.issuer, event.client_address) == ("00u1a2b3c", ISSUER, "127.0.0.1")


def test_only_the_requesters_own_events_carry_the_identity(people):
    """Events of another actor in the same request (the system's), and every
    event written outside a request, carry none."""
    workflow = plans.submit(people["agent"], ticket_plan("mixed")).workflow
    token = identity.begin(
        identity.Requester(username="reviewer", subject="s", issuer=ISSUER, client_address="192.0.2.1")
    )
    try:
        with transaction.atomic():
            own = journal.append(
                actor=people["reviewer"],
                verb="test.own",
                obj_type="workflow",
                obj_id=workflow.pk,
                workflow_id=workflow.pk,
            )
            other = journal.append(
                actor=None, verb="test.system", obj_type="workflow", obj_id=workflow.pk, workflow_id=workflow.pk
            )
    finally:
        identity.end(token)
    with transaction.atomic():
        outside = journal.append(
            actor=people["reviewer"],
            verb="test.outside",
            obj_type="workflow",
            obj_id=workflow.pk,
            workflow_id=workflow.pk,
        )
    assert journal.identity_of(own) == {"subject": "s", "issuer": ISSUER, "client_address": "192.0.2.1"}
    assert journal.identity_of(other) == {} and journal.identity_of(outside) == {}


def _trail_with_identities(people):
    """Events without identity (as written before it was recorded) and with."""
    workflow = plans.submit(people["agent"], ticket_plan("chain")).workflow
    token = identity.begin(
        identity.Requester(username="reviewer", subject="00u1", issuer=ISSUER, client_address="192.0.2.9")
    )
    try:
        decide.approve(workflow, by=people["reviewer"])
    finally:
        identity.end(token)
    return workflow


def test_identity_is_hashed_and_older_events_still_verify(people):
    _trail_with_identities(people)
    plain = AuditEvent.objects.filter(subject="").first()
    marked = AuditEvent.objects.filter(subject="00u1").first()
    assert plain is not None and marked is not None
    assert journal.verify().ok
    # An event without identity hashes exactly as before identity existed.
    fields = dict(
        stream=plain.stream,
        seq=plain.seq,
        at=plain.at,
        actor=plain.actor,
        verb=plain.verb,
        object_type=plain.object_type,
        object_id=plain.object_id,
        workflow_id=plain.workflow_id,
        data=plain.data,
    )
    assert journal.event_hash(plain.prev_hash, key=keys.by_id(plain.key_id), **fields) == plain.hash

    tamper(marked, subject="someone-else")
    result = journal.verify()
    assert not result.ok and any("was altered" in problem for problem in result.problems)


@pytest.mark.parametrize(
    "column, value", [("client_address", "10.6.6.6"), ("issuer", "https://evil.example"), ("token_id", "dc_forged")]
)
def test_rewriting_any_identity_field_breaks_the_chain(people, column, value):
    _trail_with_identities(people)
    tamper(AuditEvent.objects.filter(subject="00u1").first(), **{column: value})
    assert not journal.verify().ok


def test_the_audit_page_and_exports_show_who(people):
    _trail_with_identities(people)
    auditor = Client()
    assert auditor.login(username="auditor", password=PASSWORD)
    page = auditor.get("/audit/").content.decode()
    assert f"00u1 @ {ISSUER}" in page and "from 192.0.2.9" in page

    lines = [json.loads(line) for line in streamed(auditor.get("/audit/export.jsonl")).splitlines()]
    marked = [line for line in lines if line["subject"] == "00u1"]
    assert marked and all(line["issuer"] == ISSUER and line["client_address"] == "192.0.2.9" for line in marked)
    for line in lines:  # what an auditor holding the key recomputes, identity included
        fields = {
            name: line[name]
            for name in ("stream", "seq", "actor", "verb", "object_type", "object_id", "workflow_id", "data")
        }
        identity_fields = {name: line[name] for name in journal.IDENTITY_FIELDS}
        assert (
            journal.event_hash(
                line["prev_hash"],
                key=keys.by_id(line["key_id"]),
                at=datetime.fromisoformat(line["at"]),
                identity=identity_fields,
                **fields,
            )
            == line["hash"]
        )

    csv_text = streamed(auditor.get("/audit/export.csv"))
    header = csv_text.splitlines()[0].split(",")
    assert header[-4:] == ["subject", "issuer", "token_id", "client_address"]
    assert "00u1" in csv_text and "192.0.2.9" in csv_text


def test_the_audit_api_shows_who(people, api):
    _trail_with_identities(people)
    items = api["auditor"].get("/audit").json()["items"]
    assert {(item["subject"], item["client_address"]) for item in items} >= {("00u1", "192.0.2.9"), ("", "")}
