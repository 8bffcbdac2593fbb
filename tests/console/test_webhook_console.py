"""The webhooks console: endpoints, deliveries and replaying a dead one, with
the rules of the API's webhook endpoints (operators and auditors of the
team see, only operators replay, with a reason that the audit trail
keeps); and the list of bulk jobs."""

import pytest
from django.contrib.auth.models import Group, User

from tests.support import deciding as decide
from tests.support.desk import free_port
from tests.support.failing import fail_next_step
from tests.support.personas import PASSWORD
from tests.support.seeing import Client
from workflows import roles
from workflows.models import AuditEvent, Job, Team
from workflows.operations import bulk, plans
from workflows.webhooks import delivery
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery

SCRIPT = "<script>alert(1)</script>"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def as_user(people):
    def client_for(user):
        client = Client()
        client.force_login(people[user] if isinstance(user, str) else user)
        return client

    return client_for


@pytest.fixture
def dead(people, settings):
    """A delivery to an endpoint nobody listens on, tried once and dead-lettered
    as the workers would: the plan's name is the agent's, the description the
    operator's, both shown as text."""
    settings.WEBHOOK_MAX_ATTEMPTS = 1
    endpoint, _ = webhook_endpoints.create(
        by=people["operator"], url=f"http://127.0.0.1:{free_port()}/hook", description=f"ops {SCRIPT}"
    )
    step = {"key": "one", "action": "noop", "args": {}}
    body = {"name": f"Hooked {SCRIPT}", "submission_key": "hooked", "steps": [step]}
    workflow = plans.submit(people["agent"], body).workflow
    decide.reject(workflow, by=people["reviewer"])
    for job in delivery.claim():
        delivery.record(delivery.send(job))
    row = WebhookDelivery.objects.get(event="workflow.rejected")
    assert row.status == WebhookDelivery.Status.DEAD and row.last_error
    return row


def outsider(name, group):
    """An operator or auditor of another team only."""
    user = User.objects.create_user(name, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name=group)[0])
    Team.objects.create(name=f"{name}-team").members.add(user)
    return user


def test_an_operator_replays_a_dead_delivery_with_a_reason(people, as_user, dead):
    operator = as_user("operator")
    listed = operator.get("/webhook-deliveries/").content.decode()
    assert listed.count('data-testid="delivery-row"') == 1 and f"/webhook-deliveries/{dead.pk}/" in listed
    page = operator.get(f"/webhook-deliveries/{dead.pk}/").content.decode()
    assert dead.webhook_id in page and 'action="/webhook-deliveries/' in page and "csrfmiddlewaretoken" in page
    # No reason, nothing changes.
    operator.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "  "})
    assert WebhookDelivery.objects.get(pk=dead.pk).status == "DEAD"
    answer = operator.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "receiver is back"}, **HTMX)
    assert answer.status_code == 200 and 'data-testid="delivery-status">PENDING' in answer.content.decode()
    row = WebhookDelivery.objects.get(pk=dead.pk)
    assert row.status == "PENDING" and row.retry_base == row.attempts and row.next_attempt_at is not None
    event = AuditEvent.objects.get(verb="webhook.replayed", object_id=str(dead.pk))
    assert event.actor == "operator" and event.data["reason"] == "receiver is back"
    assert event.data["webhook_id"] == dead.webhook_id
    # A plain post is answered with the page again (POST/redirect/GET); replaying twice is refused.
    again = operator.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "twice"}, follow=True)
    assert "Only a dead-lettered delivery can be replayed." in again.content.decode()
    assert AuditEvent.objects.filter(verb="webhook.replayed").count() == 1


def test_an_auditor_sees_but_does_not_replay(people, as_user, dead):
    auditor = as_user("auditor")
    assert auditor.get("/webhooks/").status_code == 200
    assert auditor.get(f"/webhooks/{dead.endpoint_id}/").status_code == 200
    page = auditor.get(f"/webhook-deliveries/{dead.pk}/").content.decode()
    assert "Read-only" in page and "/replay" not in page
    assert auditor.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "mine"}).status_code == 403
    assert WebhookDelivery.objects.get(pk=dead.pk).status == "DEAD"
    assert not AuditEvent.objects.filter(verb="webhook.replayed").exists()


def test_reviewers_agents_and_other_teams_find_nothing(people, as_user, dead):
    paths = ["/webhooks/", f"/webhooks/{dead.endpoint_id}/", "/webhook-deliveries/", f"/webhook-deliveries/{dead.pk}/"]
    for user in ("reviewer", "agent"):
        # A role that reads no webhooks is refused their lists and details (403), as in the API.
        client = as_user(user)
        assert [client.get(path).status_code for path in paths] == [403, 403, 403, 403]
        assert client.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "x"}).status_code == 403
    # Another team's operator reads the kind: lists without our rows, 404 for our objects.
    other = as_user(outsider("other-operator", roles.OPERATORS))
    assert [other.get(path).status_code for path in paths[1::2]] == [404, 404]
    assert 'data-testid="webhook-row"' not in other.get("/webhooks/").content.decode()
    assert 'data-testid="delivery-row"' not in other.get("/webhook-deliveries/").content.decode()
    assert other.get(f"/webhook-deliveries/?endpoint={dead.endpoint_id}").status_code == 404
    assert other.post(f"/webhook-deliveries/{dead.pk}/replay", {"reason": "x"}).status_code == 404
    assert WebhookDelivery.objects.get(pk=dead.pk).status == "DEAD"


def test_untrusted_text_is_shown_as_text(people, as_user, dead):
    operator = as_user("operator")
    for path in ("/webhooks/", f"/webhook-deliveries/?endpoint={dead.endpoint_id}", f"/webhook-deliveries/{dead.pk}/"):
        html = operator.get(path).content.decode()
        assert SCRIPT not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path
    rows = operator.get("/webhook-deliveries/?status=all", **HTMX).content.decode()
    assert "<html" not in rows and rows.count('data-testid="delivery-row"') == 1
    assert operator.get("/webhook-deliveries/?status=nope").status_code == 400


def test_the_endpoint_page_counts_its_deliveries_by_status(people, as_user, dead):
    page = as_user("operator").get(f"/webhooks/{dead.endpoint_id}/").content.decode()
    assert "Dead: 1" in page and "Delivered: 0" in page


def test_the_jobs_list_shows_only_the_jobs_the_user_may_see(people, as_user):
    step = {"key": "one", "action": "ticket.create", "args": {"title": "t"}}
    workflow = plans.submit(people["agent"], {"name": "parked", "submission_key": "parked", "steps": [step]}).workflow
    decide.approve(workflow, by=people["reviewer"])
    entry = fail_next_step(workflow.pk)
    ours, _ = bulk.reconcile(
        people["operator"], {"ids": [entry.pk]}, shown_filter={"ids": [str(entry.pk)]}, dry_run=True
    )
    # Another team's operator's job, made over none of our entries.
    stranger = outsider("other-operator", roles.OPERATORS)
    theirs = Job.objects.create(
        kind=Job.Kind.RECONCILE, created_by=stranger, team=Team.objects.get(name="other-operator-team")
    )
    for user, shown, hidden in (("operator", ours, theirs), ("auditor", ours, theirs), (stranger, theirs, ours)):
        html = as_user(user).get("/jobs/").content.decode()
        assert f"/jobs/{shown.pk}/" in html and f"/jobs/{hidden.pk}/" not in html, user
    # A role that reads no jobs is refused the list, as a job's page (403).
    assert as_user("reviewer").get("/jobs/").status_code == 403
    assert as_user("reviewer").get(f"/jobs/{ours.pk}/").status_code == 403
    assert as_user(stranger).get(f"/jobs/{ours.pk}/").status_code == 404
    rows = as_user("operator").get("/jobs/", **HTMX).content.decode()
    assert "<html" not in rows and rows.count('data-testid="job-row"') == 1
