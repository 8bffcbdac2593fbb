"""The auditors' audit trail: who may see it, filters, keyset pagination,
streamed exports, chain verification (button and command) and fixed query
counts however long the trail is."""

import csv
import io
import json
import re
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from tests.support import deciding as decide
from tests.support.audit import streamed, tamper
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows.audit import journal, keys
from workflows.audit.reading import FIELDS
from workflows.models import AuditEvent, AuditVerification
from workflows.operations import plans

HTMX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "<script>alert(1)</script>"
LIST = "/audit/"
CSV = "/audit/export.csv"
JSONL = "/audit/export.jsonl"
VERIFY = "/audit/verify"
STAFF = ["reviewer", "operator", "agent"]


@pytest.fixture
def as_user(people):
    def client_for(name):
        client = Client()
        client.force_login(people[name])
        return client

    return client_for


@pytest.fixture
def auditor(as_user):
    return as_user("auditor")


@pytest.fixture
def trail(people):
    """Two workflows submitted by the agent: the reviewer approves the first
    once its previews are taken, the second reviewer rejects the second."""
    first = plans.submit(people["agent"], ticket_plan("audit-1")).workflow
    second = plans.submit(people["agent"], ticket_plan("audit-2")).workflow
    decide.approve(first, by=people["reviewer"])
    decide.reject(second, by=people["reviewer2"])
    return {"first": first, "second": second}


def add_events(count, *, actor="bot", verb="test.tick", workflow_id=None, data=None):
    with transaction.atomic():
        return [
            journal.append(
                actor=actor,
                verb=verb,
                obj_type="test",
                obj_id=i,
                workflow_id=workflow_id,
                data=data if data is not None else {"i": i},
            )
            for i in range(count)
        ]


def row_ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-testid="audit-row" data-id="(\d+)"', response.content.decode())]


def older_link(response) -> str | None:
    match = re.search(
        r'<a href="([^"]+)"\s+hx-get="[^"]+"\s+hx-target="#audit-results"[^>]*>Older…</a>', response.content.decode()
    )
    return match.group(1).replace("&amp;", "&") if match else None


# --- who may see it ---------------------------------------------------------


def _body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


@pytest.mark.parametrize("path", [LIST, CSV, JSONL])
def test_only_auditors_read_the_trail(people, as_user, trail, path):
    """Other roles are refused the page and the exports (403), as the API
    (tests/api/test_read_side.py)."""
    first = str(trail["first"].pk)
    for name in ("auditor", "admin"):
        response = as_user(name).get(path)
        assert response.status_code == 200 and first in _body(response), name
    for name in STAFF:
        response = as_user(name).get(path)
        assert response.status_code == 403 and first not in _body(response), name
    anonymous = Client().get(path)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


def test_only_auditors_verify(people, as_user, trail):
    for name in STAFF:
        assert as_user(name).post(VERIFY).status_code == 403, name
    anonymous = Client().post(VERIFY)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert not AuditVerification.objects.exists()
    for name in ("auditor", "admin"):
        response = as_user(name).post(VERIFY)
        assert response.status_code == 302 and response["Location"] == LIST
    assert list(AuditVerification.objects.values_list("by", flat=True).order_by("id")) == ["auditor", "admin"]


def test_only_auditors_use_the_audit_api(api, trail):
    for name in ("auditor", "admin"):
        assert api[name].get("/audit").status_code == 200, name
    for name in STAFF:
        assert api[name].get("/audit").status_code == 403, name
    assert Client().get("/api/v1/audit").status_code == 401


def test_the_nav_links_the_trail_for_auditors_only(as_user, people):
    assert 'href="/audit/"' in as_user("auditor").get("/").content.decode()
    assert 'href="/audit/"' not in as_user("reviewer").get("/").content.decode()


# --- browsing ---------------------------------------------------------------


def test_the_list_shows_newest_first(auditor, trail):
    response = auditor.get(LIST)
    expected = list(AuditEvent.objects.order_by("-id").values_list("id", flat=True))
    assert len(expected) == 5  # two submissions, the previews of the first, an approval, a rejection
    assert row_ids(response) == expected
    html = response.content.decode()
    event = AuditEvent.objects.get(verb="workflow.approved")
    assert f'href="/workflows/{event.workflow_id}/"' in html
    assert event.hash[:12] in html


def test_each_filter_narrows_the_rows(auditor, api, trail):
    first = trail["first"]
    by_reviewer = list(AuditEvent.objects.filter(actor="reviewer").order_by("-id").values_list("id", flat=True))
    approved = list(AuditEvent.objects.filter(verb="workflow.approved").values_list("id", flat=True))
    of_first = list(AuditEvent.objects.filter(workflow_id=first.pk).order_by("-id").values_list("id", flat=True))
    everything = AuditEvent.objects.count()
    assert 0 < len(by_reviewer) < everything and len(approved) == 1 and 0 < len(of_first) < everything

    assert row_ids(auditor.get(LIST, {"actor": "reviewer"})) == by_reviewer
    assert row_ids(auditor.get(LIST, {"verb": "workflow.approved"})) == approved
    assert row_ids(auditor.get(LIST, {"workflow": str(first.pk)})) == of_first
    assert row_ids(auditor.get(LIST, {"actor": "reviewer", "verb": "workflow.submitted"})) == []

    assert [e["id"] for e in api["auditor"].get("/audit", actor="reviewer").json()["items"]] == by_reviewer
    assert [e["id"] for e in api["auditor"].get("/audit", verb="workflow.approved").json()["items"]] == approved
    assert [e["id"] for e in api["auditor"].get("/audit", workflow=str(first.pk)).json()["items"]] == of_first


def test_the_time_range_is_from_inclusive_to_exclusive(auditor, api, people):
    stamps = [datetime(2020, 1, 1, hour, 0, tzinfo=UTC) for hour in (10, 11, 12)]
    events = []
    for stamp in stamps:
        with mock.patch("django.utils.timezone.now", return_value=stamp):
            events += add_events(1, verb="test.timed")
    eleven = events[1]

    page = auditor.get(LIST, {"since": "2020-01-01T11:00", "until": "2020-01-01T12:00"})
    assert row_ids(page) == [eleven.pk]
    assert row_ids(auditor.get(LIST, {"since": "2020-01-01T10:30:00"})) == list(
        AuditEvent.objects.filter(at__gte=stamps[1]).order_by("-id").values_list("id", flat=True)
    )
    assert row_ids(auditor.get(LIST, {"until": "2020-01-01T11:00"})) == [events[0].pk]

    items = api["auditor"].get("/audit", since="2020-01-01T11:00:00", until="2020-01-01T12:00:00Z").json()["items"]
    assert [e["id"] for e in items] == [eleven.pk]
    assert items[0]["at"].startswith("2020-01-01T11:00:00")

    jsonl = streamed(auditor.get(JSONL, {"since": "2020-01-01T11:00", "until": "2020-01-01T12:00"}))
    assert [json.loads(line)["id"] for line in jsonl.splitlines()] == [eleven.pk]


def utc(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    "since, until, low, high",
    [
        ("2020-01-01T11:30:00+00:30", "2020-01-01T12:30:00+00:30", utc(2020, 1, 1, 11), utc(2020, 1, 1, 12)),
        # Beyond PostgreSQL's ±15:59.
        ("2020-01-02T03:00:00+16:00", "2020-01-02T04:00:00+16:00", utc(2020, 1, 1, 11), utc(2020, 1, 1, 12)),
        ("2020-01-01T00:00:00-23:59", None, utc(2020, 1, 1, 23, 59), None),
        # Before the calendar's first instant in UTC, and after its last.
        ("0001-01-01T00:00:00+23:00", "2020-01-01T11:00:00Z", None, utc(2020, 1, 1, 11)),
        ("2020-01-01T12:00:00Z", "9999-12-31T23:00:00-05:00", utc(2020, 1, 1, 12), None),
    ],
    ids=["half-hour", "plus-16", "minus-23:59", "before-year-1", "after-9999"],
)
def test_any_iso_offset_filters_by_the_instant_it_names(api, since, until, low, high):
    for hour in (10, 11, 12):
        with mock.patch("django.utils.timezone.now", return_value=utc(2020, 1, 1, hour)):
            add_events(1, verb="test.timed")
    expected = AuditEvent.objects.order_by("-id")
    if low:
        expected = expected.filter(at__gte=low)
    if high:
        expected = expected.filter(at__lt=high)

    response = api["auditor"].get("/audit", since=since, **({"until": until} if until else {}))

    assert response.status_code == 200, response.content
    assert [e["id"] for e in response.json()["items"]] == list(expected.values_list("id", flat=True))
    assert AuditEvent.objects.filter(verb="test.timed").count() == 3


def test_an_invalid_filter_is_a_form_error_not_a_500(auditor, api, trail):
    response = auditor.get(LIST, {"workflow": "not-a-uuid"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Enter a workflow id (a UUID)." in html
    assert row_ids(response) == []
    partial = auditor.get(LIST, {"workflow": "not-a-uuid"}, **HTMX).content.decode()
    assert "Enter a workflow id (a UUID)." in partial and "<html" not in partial

    backwards = auditor.get(LIST, {"since": "2024-01-02T00:00", "until": "2024-01-01T00:00"})
    assert "must be after" in backwards.content.decode() and row_ids(backwards) == []
    assert "Enter a valid date/time." in auditor.get(LIST, {"since": "yesterday"}).content.decode()

    assert auditor.get(CSV, {"workflow": "not-a-uuid"}).status_code == 400
    assert auditor.get(JSONL, {"since": "yesterday"}).status_code == 400
    assert auditor.get(LIST, {"cursor": "!!!"}).status_code == 400

    bad = api["auditor"].get("/audit", workflow="not-a-uuid")
    assert bad.status_code == 400 and "workflow" in bad.json()["error"]["fields"]
    bad_cursor = api["auditor"].get("/audit", cursor="!!!")
    assert bad_cursor.status_code == 400 and bad_cursor.json()["error"]["code"] == "invalid_cursor"


def test_keyset_pagination_walks_every_event_exactly_once(auditor, api, trail):
    add_events(230)
    expected = list(AuditEvent.objects.order_by("-id").values_list("id", flat=True))

    seen, sizes, url = [], [], LIST
    while url:
        response = auditor.get(url)
        assert response.status_code == 200
        sizes.append(len(row_ids(response)))
        seen += row_ids(response)
        url = older_link(response)
    assert seen == expected
    assert sizes[:2] == [100, 100] and sum(sizes) == len(expected)

    seen, cursor = [], None
    while True:
        body = api["auditor"].get("/audit", limit=75, **({"cursor": cursor} if cursor else {})).json()
        seen += [item["id"] for item in body["items"]]
        cursor = body["next"]
        if cursor is None:
            break
    assert seen == expected


def test_pagination_keeps_the_filter(auditor, trail):
    add_events(120, actor="bot")
    add_events(5, actor="other")
    first_page = auditor.get(LIST, {"actor": "bot"})
    link = older_link(first_page)
    assert "actor=bot" in link
    second_page = auditor.get(link)
    assert len(row_ids(first_page)) == 100 and len(row_ids(second_page)) == 20
    assert set(AuditEvent.objects.filter(pk__in=row_ids(second_page)).values_list("actor", flat=True)) == {"bot"}


def test_an_htmx_filter_gets_the_rows_partial_only(auditor, trail):
    response = auditor.get(LIST, {"actor": "reviewer"}, **HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html and 'role="search"' not in html
    assert 'id="audit-chain"' in html and 'data-testid="audit-row"' in html
    assert row_ids(response) == list(
        AuditEvent.objects.filter(actor="reviewer").order_by("-id").values_list("id", flat=True)
    )
    full = auditor.get(LIST, {"actor": "reviewer"}).content.decode()
    assert "<html" in full and 'hx-push-url="true"' in full


def test_hostile_text_is_escaped(auditor, trail):
    add_events(1, actor=SCRIPT, verb="test.hostile", data={"note": SCRIPT})
    html = auditor.get(LIST).content.decode()
    assert SCRIPT not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- exports ----------------------------------------------------------------


def test_csv_export_is_streamed_and_neutralises_formulas(auditor, trail):
    formula = '=HYPERLINK("http://evil.example","click")'
    add_events(1, actor=formula, verb="+cmd", data={"note": "@SUM(A1)"})
    response = auditor.get(CSV)
    assert response["Content-Type"].startswith("text/csv")
    assert re.fullmatch(r'attachment; filename="audit-\d{8}T\d{6}Z\.csv"', response["Content-Disposition"])
    rows = list(csv.reader(io.StringIO(streamed(response))))
    assert rows[0] == list(FIELDS)
    expected = list(AuditEvent.objects.order_by("id"))
    assert [int(row[0]) for row in rows[1:]] == [event.pk for event in expected]

    hostile = rows[-1]
    record = dict(zip(FIELDS, hostile))
    assert record["actor"] == "'" + formula
    assert record["verb"] == "'+cmd"
    assert json.loads(record["data"]) == {"note": "@SUM(A1)"}
    for row in rows[1:]:
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in row)

    approved = AuditEvent.objects.get(verb="workflow.approved")
    line = dict(zip(FIELDS, next(row for row in rows if row[0] == str(approved.pk))))
    assert line["stream"] == str(approved.workflow_id) and line["workflow_id"] == str(approved.workflow_id)
    assert line["hash"] == approved.hash and line["prev_hash"] == approved.prev_hash
    assert datetime.fromisoformat(line["at"]) == approved.at and line["at"].endswith("+00:00")
    assert json.loads(line["data"]) == approved.data


def test_csv_export_applies_the_filter(auditor, trail):
    response = auditor.get(CSV, {"workflow": str(trail["second"].pk)})
    rows = list(csv.reader(io.StringIO(streamed(response))))[1:]
    assert [int(row[0]) for row in rows] == list(
        AuditEvent.objects.filter(workflow_id=trail["second"].pk).order_by("id").values_list("id", flat=True)
    )


def test_jsonl_export_is_one_event_per_line(auditor, trail):
    response = auditor.get(JSONL, {"actor": "agent"})
    assert re.fullmatch(r'attachment; filename="audit-\d{8}T\d{6}Z\.jsonl"', response["Content-Disposition"])
    lines = [json.loads(line) for line in streamed(response).splitlines()]
    expected = list(AuditEvent.objects.filter(actor="agent").order_by("id"))
    assert len(expected) == 2
    assert [line["id"] for line in lines] == [event.pk for event in expected]
    assert all(list(line) == list(FIELDS) for line in lines)
    assert lines[0]["data"] == expected[0].data and lines[0]["hash"] == expected[0].hash


def rehash(item: dict) -> str:
    """What an auditor holding the audit key recomputes."""
    fields = {
        name: item[name]
        for name in ("stream", "seq", "actor", "verb", "object_type", "object_id", "workflow_id", "data")
    }
    key = keys.by_id(item["key_id"])
    return journal.event_hash(item["prev_hash"], key=key, at=datetime.fromisoformat(item["at"]), **fields)


def test_exported_and_api_events_carry_enough_to_recompute_the_chain(auditor, api, trail):
    exported = [json.loads(line) for line in streamed(auditor.get(JSONL)).splitlines()]
    listed = api["auditor"].get("/audit").json()["items"]
    assert len(exported) == len(listed) == AuditEvent.objects.count()
    for item in exported + listed:
        assert (item["hash_alg"], item["key_id"]) == ("hmac-sha256", keys.current().kid)
        assert rehash(item) == item["hash"], item


# --- verification -----------------------------------------------------------


def test_a_get_never_verifies(auditor, trail):
    auditor.get(LIST)
    auditor.get(LIST, {"workflow": str(trail["first"].pk)}, **HTMX)
    assert not AuditVerification.objects.exists()
    assert "Never verified" in auditor.get(LIST).content.decode()
    assert auditor.get(VERIFY).status_code == 405


def test_verify_now_shows_ok_then_broken_after_tampering(auditor, trail):
    response = auditor.post(VERIFY, follow=True)
    html = response.content.decode()
    assert 'data-testid="chain-status">OK<' in html and "Audit chain OK (whole chain)" in html
    check = AuditVerification.objects.get()
    assert check.ok and check.scope == "" and check.events == AuditEvent.objects.count() and check.streams == 2

    tamper(AuditEvent.objects.get(verb="workflow.approved"), actor="mallory")
    partial = auditor.post(VERIFY, **HTMX).content.decode()
    assert "<html" not in partial and 'id="audit-chain"' in partial
    assert 'data-testid="chain-status">BROKEN<' in partial and "was altered" in partial
    assert 'data-testid="chain-status">BROKEN<' in auditor.get(LIST).content.decode()


def test_verify_now_with_a_workflow_filter_checks_only_that_stream(auditor, trail):
    first, second = trail["first"], trail["second"]
    tamper(AuditEvent.objects.get(workflow_id=second.pk, verb="workflow.submitted"), actor="mallory")
    response = auditor.post(VERIFY, {"workflow": str(first.pk)})
    assert response["Location"] == f"{LIST}?workflow={first.pk}"
    check = AuditVerification.objects.get()
    assert check.ok and check.scope == str(first.pk) and check.streams == 1
    assert check.events == AuditEvent.objects.filter(workflow_id=first.pk).count()

    page = auditor.get(LIST, {"workflow": str(first.pk)}).content.decode()
    assert 'data-testid="chain-status">OK<' in page and "Verify now (this workflow" in page
    # The whole chain was never checked: this workflow's OK must not pass for it.
    assert not AuditVerification.objects.filter(scope="").exists()
    assert "Never verified" in auditor.get(LIST).content.decode()

    auditor.post(VERIFY, {"workflow": str(second.pk)})
    assert not AuditVerification.objects.get(scope=str(second.pk)).ok


def test_verify_with_an_invalid_workflow_records_nothing(auditor, trail):
    response = auditor.post(VERIFY, {"workflow": "nope"}, follow=True)
    assert "Not verified" in response.content.decode()
    assert not AuditVerification.objects.exists()


def test_verify_audit_command_records_what_the_page_shows(auditor, trail, capsys):
    call_command("verify_audit")
    assert "audit chain OK" in capsys.readouterr().out
    check = AuditVerification.objects.get()
    assert check.by == "verify_audit" and check.ok
    html = auditor.get(LIST).content.decode()
    assert 'data-testid="chain-status">OK<' in html and "by verify_audit" in html

    tamper(AuditEvent.objects.filter(verb="workflow.submitted").first(), data='{"name": "forged"}')
    with pytest.raises(CommandError, match="BROKEN"):
        call_command("verify_audit")
    latest = AuditVerification.objects.latest("id")
    assert not latest.ok and latest.problem_count >= 1 and latest.problems
    html = auditor.get(LIST).content.decode()
    assert 'data-testid="chain-status">BROKEN<' in html and "was altered" in html


# --- fixed query counts -----------------------------------------------------

# session, user, groups, teams, the teams' webhook endpoints, jobs and grants, page of events, latest whole-chain
# check, the workflow is the auditor's team's, its latest check
LIST_QUERIES = 11
API_QUERIES = 7  # token with its user, groups, teams, the teams' webhook endpoints, jobs and grants, page of events
EXPORT_QUERIES = 8  # session, user, groups, teams, the teams' webhook endpoints, jobs and grants, the events


@pytest.mark.parametrize("count", [5, 150])
def test_the_list_runs_a_fixed_number_of_queries(auditor, people, django_assert_num_queries, count):
    # A workflow of the auditor's team: only those teams' events are listed.
    workflow = plans.submit(people["agent"], ticket_plan("counted")).workflow
    events = add_events(count, workflow_id=str(workflow.pk))
    journal.record_verification(by="auditor")
    with django_assert_num_queries(LIST_QUERIES):
        response = auditor.get(LIST, {"workflow": str(events[0].workflow_id), "actor": "bot"})
    assert len(row_ids(response)) == min(count, 100)


@pytest.mark.parametrize("count", [5, 150])
def test_the_api_runs_a_fixed_number_of_queries(api, django_assert_num_queries, count):
    add_events(count)
    api["auditor"].get("/audit", limit=1)  # the token's first use also records it; not what is measured here
    with django_assert_num_queries(API_QUERIES):
        response = api["auditor"].get("/audit", limit=200)
    assert len(response.json()["items"]) == count


@pytest.mark.parametrize("count", [5, 150])
@pytest.mark.parametrize("path", [CSV, JSONL])
def test_an_export_runs_a_fixed_number_of_queries(auditor, django_assert_num_queries, count, path):
    add_events(count)
    with django_assert_num_queries(EXPORT_QUERIES):
        body = streamed(auditor.get(path))
    assert len(body.splitlines()) == count + (1 if path == CSV else 0)
