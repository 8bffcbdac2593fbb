"""Several plans decided from the inbox (docs/guides/reviewers.md#deciding-several-plans-at-once):
select, one confirmation page that shows each plan, its revision and plan
hash, and binds what it showed; then each plan's outcome. A plan revised
after the page was shown is refused stale; the others are decided."""

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from tests.support.seeing import Client, previews_taken
from workflows.models import Approval, AuditEvent, Workflow
from workflows.operations import plans

NOOP = {"steps": [{"key": "a", "action": "noop", "args": {"n": 1}}]}
HOSTILE = '<script>alert("x")</script>'


class FormFields(HTMLParser):
    """The fields one form of a page sends: its inputs, by name, in order."""

    def __init__(self, form_id: str):
        super().__init__()
        self.form_id, self.inside, self.fields = form_id, False, []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.inside = attrs.get("id") == self.form_id
        elif tag == "input" and self.inside and attrs.get("name"):
            self.fields.append((attrs["name"], attrs.get("value", "")))

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False


def form_fields(page: str, form_id: str) -> dict:
    parser = FormFields(form_id)
    parser.feed(page)
    data: dict = {}
    for name, value in parser.fields:
        data.setdefault(name, []).append(value)
    return data


def submit(people, key, name=None, plan=None):
    body = {**(plan or NOOP), "name": name or key, "submission_key": key}
    workflow = plans.submit(people["agent"], body).workflow
    previews_taken(workflow.pk)
    return workflow


@pytest.fixture
def reviewer(people):
    client = Client()
    assert client.login(username="reviewer", password="correct horse battery staple")
    return client


def confirmation(client, decision, workflows):
    ids = [str(w.pk) for w in workflows]
    return client.get(reverse("confirm_decisions"), {"decision": decision, "workflow": ids})


def test_the_inbox_offers_each_plan_awaiting_review_for_selection(people, reviewer):
    theirs = submit(people, "theirs")
    page = reviewer.get(reverse("inbox")).content.decode()
    assert f'name="workflow" value="{theirs.pk}" form="decide-selected"' in page
    assert 'action="/decisions/confirm"' in page and 'method="get"' in page
    assert "Approve selected" in page and "Reject selected" in page
    # The reviewer's own plan is not theirs to decide: not offered.
    own = plans.submit(people["reviewer"], {**NOOP, "name": "mine", "submission_key": "mine"}).workflow
    assert str(own.pk) not in reviewer.get(reverse("inbox")).content.decode()


def test_select_confirm_decide_each_plan_and_a_plan_revised_in_between_is_refused_stale(people, reviewer):
    first = submit(people, "first", name=HOSTILE)
    revised = submit(people, "revised", plan=ticket_plan("revised"))
    third = submit(people, "third")
    page = confirmation(reviewer, "approve", [first, revised, third])
    assert page.status_code == 200
    html = page.content.decode()
    assert HOSTILE not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert html.count('data-testid="selected-plan"') == 3
    for workflow in (first, revised, third):
        assert f"Approve revision {workflow.revision}" in html and workflow.plan_hash[:12] in html
    fields = form_fields(html, "decide-several")
    assert fields["workflow"] == [str(first.pk), str(revised.pk), str(third.pk)]
    assert fields[f"plan_hash-{revised.pk}"] == [revised.plan_hash]
    assert len(fields[f"preview-{revised.pk}"]) == 3  # the ticket plan's three previews, as the page showed them

    # Between the page and Confirm, another reviewer edits one of the plans.
    decide.revise(revised, by=people["reviewer2"], steps=[{"key": "open", "args": {"title": "Smoke", "body": "3"}}])
    before = AuditEvent.objects.count()
    answer = reviewer.post(reverse("decide_several"), {**fields, "comment": "all good"})
    assert answer.status_code == 200
    result = answer.content.decode()
    assert "Approve: 2 decided, 1 refused" in result
    assert "The plan changed since you looked: you saw revision 1, it is now revision 2" in result
    assert f"/workflows/{revised.pk}/changed?seen=1" in result
    assert HOSTILE not in result
    statuses = dict(Workflow.objects.values_list("pk", "status"))
    assert (statuses[first.pk], statuses[revised.pk], statuses[third.pk]) == ("APPROVED", "PLANNED", "APPROVED")
    approved = AuditEvent.objects.filter(id__gt=before, verb="workflow.approved")
    assert sorted(str(e.workflow_id) for e in approved) == sorted([str(first.pk), str(third.pk)])
    assert {a.comment for a in Approval.objects.all()} == {"all good"}


def test_reject_selected_rejects_each(people, reviewer):
    plans_ = [submit(people, f"r{n}") for n in range(2)]
    fields = form_fields(confirmation(reviewer, "reject", plans_).content.decode(), "decide-several")
    assert fields["decision"] == ["reject"]
    answer = reviewer.post(reverse("decide_several"), {**fields, "comment": "no"})
    assert "Reject: 2 decided, 0 refused" in answer.content.decode()
    assert set(Workflow.objects.values_list("status", flat=True)) == {"REJECTED"}


def test_the_confirmation_leaves_out_what_no_longer_awaits_review(people, reviewer):
    waiting, done = submit(people, "waiting"), submit(people, "done")
    decide.approve(done, by=people["reviewer2"])
    html = confirmation(reviewer, "approve", [waiting, done]).content.decode()
    assert form_fields(html, "decide-several")["workflow"] == [str(waiting.pk)]
    assert "it is APPROVED, no longer awaiting review" in html


def test_more_than_100_selected_is_refused_with_a_clear_error_and_nothing_decided(people, reviewer):
    many = [submit(people, f"m{n}") for n in range(101)]
    answer = confirmation(reviewer, "approve", many)
    assert answer.status_code == 302 and answer["Location"] == reverse("inbox")
    assert "Select from 1 to 100 plans to decide at once, not 101." in reviewer.get(reverse("inbox")).content.decode()
    data = {"decision": "approve", "workflow": [str(w.pk) for w in many]}
    for workflow in many:
        data.update({f"revision-{workflow.pk}": "1", f"plan_hash-{workflow.pk}": workflow.plan_hash})
    refused = reviewer.post(reverse("decide_several"), data)
    assert refused.status_code == 302 and not Approval.objects.exists()


@pytest.mark.parametrize(
    "query", [{"decision": "maybe", "workflow": ["x"]}, {"decision": "approve", "workflow": ["x"]}]
)
def test_a_forged_selection_is_a_400(people, reviewer, query):
    assert reviewer.get(reverse("confirm_decisions"), query).status_code == 400


def test_only_reviewers_decide_several(people):
    workflow = submit(people, "op")
    client = Client()
    client.force_login(people["operator"])
    assert confirmation(client, "approve", [workflow]).status_code == 403
    data = {"decision": "approve", "workflow": [str(workflow.pk)], f"revision-{workflow.pk}": "1"}
    assert client.post(reverse("decide_several"), data).status_code == 403
    assert not Approval.objects.exists()
