"""The ticket desk, exercised over HTTP as a real process.

No database: the desk has its own SQLite file, and these tests never touch
the project's database.
"""

import http.client
import json
import threading
import time
from datetime import datetime

import pytest
import requests

from tests.support.desk import TicketDesk

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def shared_desk(tmp_path_factory):
    desk = TicketDesk(tmp_path_factory.mktemp("ticketdesk") / "desk.sqlite3")
    desk.start()
    yield desk
    desk.stop()


@pytest.fixture
def desk(shared_desk):
    if not shared_desk.running:
        shared_desk.start()
    shared_desk.reset()
    return shared_desk


@pytest.fixture
def own_desk(tmp_path):
    """A desk of the test's own, for restarts and kills."""
    desk = TicketDesk(tmp_path / "desk.sqlite3")
    yield desk
    desk.kill()


def create(desk, title="Printer on fire", body="3rd floor", key=None, **kwargs):
    headers = {"Idempotency-Key": key} if key else {}
    return desk.request("POST", "/tickets", json={"title": title, "body": body}, headers=headers, **kwargs)


def assert_error(response, status):
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    return error


# -- the API ------------------------------------------------------------------


def test_create_then_repeat_with_same_key_returns_same_ticket(desk):
    first = create(desk, key="k-1")
    assert first.status_code == 201
    assert first.headers["Content-Type"] == "application/json"
    ticket = first.json()
    assert ticket["id"] == 1
    assert ticket["title"] == "Printer on fire"
    assert ticket["status"] == "open"

    again = create(desk, key="k-1")
    assert again.status_code == 200
    assert again.json() == ticket

    tickets = desk.tickets()
    assert len(tickets) == 1
    assert tickets[0]["idempotency_key"] == "k-1"
    assert tickets[0]["body"] == "3rd floor"
    assert tickets[0]["comments"] == []

    ledger = desk.ledger()
    assert len(ledger) == 1  # the repeat changed nothing
    entry = ledger[0]
    assert {k: entry[k] for k in ("method", "path", "idempotency_key", "status")} == {
        "method": "POST",
        "path": "/tickets",
        "idempotency_key": "k-1",
        "status": 201,
    }
    assert datetime.fromisoformat(entry["at"]).utcoffset().total_seconds() == 0


def test_without_key_every_post_creates_a_ticket(desk):
    assert create(desk).status_code == 201
    assert create(desk).status_code == 201
    assert [t["id"] for t in desk.tickets()] == [1, 2]
    assert [e["idempotency_key"] for e in desk.ledger()] == [None, None]


@pytest.mark.parametrize("payload", [{"body": "no title"}, {"title": ""}, {"title": "   "}, {"title": 7}, ["x"]])
def test_missing_or_bad_title_is_400(desk, payload):
    response = desk.request("POST", "/tickets", json=payload, headers={"Idempotency-Key": "bad"})
    assert_error(response, 400)
    assert desk.tickets() == []
    assert desk.ledger() == []


def test_invalid_json_is_400(desk):
    response = desk.request(
        "POST", "/tickets", data=b"{not json", headers={"Content-Type": "application/json", "Idempotency-Key": "j"}
    )
    assert_error(response, 400)
    assert desk.tickets() == []


def test_lookup_by_idempotency_key(desk):
    ticket = create(desk, key="find-me").json()
    create(desk, title="other", key="other")
    assert desk.tickets(idempotency_key="find-me") == [desk.ticket(ticket["id"])]
    assert desk.tickets(idempotency_key="nobody") == []
    assert len(desk.tickets()) == 2


def test_comment_and_close(desk):
    ticket = create(desk, key="c").json()
    path = f"/tickets/{ticket['id']}"

    comment = desk.request("POST", f"{path}/comments", json={"body": "on it"}, headers={"Idempotency-Key": "c1"})
    assert comment.status_code == 201
    assert comment.json()["body"] == "on it"
    repeat = desk.request("POST", f"{path}/comments", json={"body": "on it"}, headers={"Idempotency-Key": "c1"})
    assert repeat.status_code == 200
    assert repeat.json() == comment.json()
    assert desk.request("POST", f"{path}/comments", json={"body": "second"}).status_code == 201
    assert_error(desk.request("POST", f"{path}/comments", json={}), 400)

    closed = desk.request("POST", f"{path}/close", headers={"Idempotency-Key": "close-1"})
    assert closed.status_code == 200
    assert closed.json()["status"] == "closed"

    again = desk.request("POST", f"{path}/close", headers={"Idempotency-Key": "close-2"})
    assert again.status_code == 200
    assert again.json()["status"] == "closed"

    stored = desk.ticket(ticket["id"])
    assert stored["status"] == "closed"
    assert [c["body"] for c in stored["comments"]] == ["on it", "second"]
    assert all(datetime.fromisoformat(c["at"]) for c in stored["comments"])

    assert [(e["path"], e["idempotency_key"], e["status"]) for e in desk.ledger()] == [
        ("/tickets", "c", 201),
        (f"{path}/comments", "c1", 201),
        (f"{path}/comments", None, 201),
        (f"{path}/close", "close-1", 200),  # closing again is a no-op, not a change
    ]


def test_unknown_ticket_and_unknown_path_are_404(desk):
    assert_error(desk.request("GET", "/tickets/99"), 404)
    assert_error(desk.request("POST", "/tickets/99/comments", json={"body": "x"}), 404)
    assert_error(desk.request("POST", "/tickets/99/close"), 404)
    assert_error(desk.request("GET", "/tickets/abc"), 404)
    assert_error(desk.request("GET", "/nowhere"), 404)
    assert desk.ledger() == []


def test_keep_alive(desk):
    connection = http.client.HTTPConnection(desk.host, desk.port, timeout=5)
    try:
        for i in range(3):
            body = json.dumps({"title": f"t{i}"})
            connection.request("POST", "/tickets", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 201
            assert json.loads(response.read())["title"] == f"t{i}"
            assert response.getheader("Connection", "").lower() != "close"
    finally:
        connection.close()


def post_at_once(n, send):
    """Call ``send(i)`` from n threads released together; (results, errors)."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        barrier.wait()
        try:
            results[i] = send(i)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results, errors


def test_concurrent_posts_with_same_key_create_one_ticket(desk):
    # A latency fault holds every request inside the desk, so the twenty
    # really are in flight together (the probe's mark shows it).
    desk.fault(mode="latency", ms=2000)
    desk.reset_concurrency()

    def send(i):
        response = create(desk, key="same", timeout=30)
        return response.status_code, response.json()["id"]

    results, errors = post_at_once(20, send)

    assert errors == []
    assert desk.concurrency()["max_in_flight"]["POST /tickets"] == 20
    assert sorted(status for status, _ in results) == [200] * 19 + [201]
    assert len({ticket_id for _, ticket_id in results}) == 1
    assert len(desk.tickets()) == 1
    assert len(desk.ledger()) == 1


def test_latency_fault_holds_no_lock_so_requests_wait_side_by_side(desk):
    ticket = create(desk, key="base").json()
    desk.fault(mode="latency", ms=3000)
    desk.reset_concurrency()
    kinds = [
        ("POST /tickets", lambda i: create(desk, key=f"k{i}", timeout=60)),
        (
            "POST /tickets/{id}/comments",
            lambda i: desk.request(
                "POST",
                f"/tickets/{ticket['id']}/comments",
                json={"body": f"c{i}"},
                headers={"Idempotency-Key": f"c{i}"},
                timeout=60,
            ),
        ),
    ]
    n = 100  # per kind: 200 requests in all, against the default pool of 256

    def send(i):
        kind, call = kinds[i % 2]
        return kind, call(i // 2).status_code

    results, errors = post_at_once(2 * n, send)

    assert errors == []
    assert sorted(results) == [("POST /tickets", 201)] * n + [("POST /tickets/{id}/comments", 201)] * n
    marks = desk.concurrency()
    assert marks["max_in_flight"]["POST /tickets"] == n
    assert marks["max_in_flight"]["POST /tickets/{id}/comments"] == n
    assert marks["in_flight"] == dict.fromkeys(marks["in_flight"], 0)
    assert len(desk.ledger()) == 1 + 2 * n


def test_threads_option_bounds_requests_in_flight_and_the_rest_wait_their_turn(tmp_path):
    with TicketDesk(tmp_path / "desk.sqlite3", threads=4) as desk:
        desk.fault(mode="latency", ms=1000)
        results, errors = post_at_once(12, lambda i: create(desk, key=f"p{i}", timeout=60).status_code)
        assert errors == []
        assert results == [201] * 12
        assert desk.concurrency()["max_in_flight"]["POST /tickets"] == 4
        assert len(desk.tickets()) == 12


def test_the_desks_own_controls_are_served_while_every_slot_waits_in_a_latency_fault(tmp_path):
    """The bound is for the served API: with both slots held by requests
    sleeping in a 20 s fault, the test controls still answer at once, and
    clearing the fault lets the next request through without it. (20 s, not
    just over the controls' 10 s timeout: on a loaded host the second
    request may take seconds to reach its slot, and the first must still be
    asleep when the ledger is read.)"""
    with TicketDesk(tmp_path / "desk.sqlite3", threads=2) as desk:
        desk.fault(mode="latency", ms=20000)
        sleepers = [threading.Thread(target=lambda i=i: create(desk, key=f"held-{i}", timeout=60)) for i in range(2)]
        for thread in sleepers:
            thread.start()
        deadline = time.monotonic() + 10
        while desk.concurrency()["in_flight"]["POST /tickets"] < 2:
            assert time.monotonic() < deadline, "the two requests never took their slots"
            time.sleep(0.05)
        desk.clear_faults()  # a 10 s timeout: it would wait ~20 s for a slot if it needed one
        assert desk.faults() == [] and desk.ledger() == []
        for thread in sleepers:
            thread.join()
        assert len(desk.tickets()) == 2


def test_concurrency_probe_counts_each_kind_and_resets(desk):
    probe = desk.concurrency()
    assert set(probe) == {"in_flight", "max_in_flight"}
    kinds = {"POST /tickets", "POST /tickets/{id}/comments", "POST /tickets/{id}/close", "GET /tickets"}
    assert set(probe["in_flight"]) == kinds and set(probe["max_in_flight"]) == kinds
    desk.reset_concurrency()
    ticket = create(desk, key="probe").json()
    desk.request("POST", f"/tickets/{ticket['id']}/comments", json={"body": "b"})
    desk.request("POST", f"/tickets/{ticket['id']}/close")
    desk.tickets("probe")
    desk.ledger()  # not a probed kind
    assert desk.concurrency() == {"in_flight": dict.fromkeys(kinds, 0), "max_in_flight": dict.fromkeys(kinds, 1)}
    desk.reset_concurrency()
    assert desk.concurrency()["max_in_flight"] == dict.fromkeys(kinds, 0)
    assert_error(desk.request("POST", "/_concurrency"), 405)


# -- faults -------------------------------------------------------------------


def test_error_fault(desk):
    fault = desk.fault(mode="error", status=503, count=2)
    assert fault["mode"] == "error" and fault["status"] == 503 and fault["count"] == 2

    assert_error(create(desk, key="e"), 503)
    assert desk.tickets() == []  # GETs are not affected
    assert_error(create(desk, key="e"), 503)
    assert desk.tickets() == []
    assert desk.ledger() == []
    assert desk.faults() == []  # used up

    assert create(desk, key="e").status_code == 201
    assert len(desk.tickets()) == 1


def test_rate_limit_fault(desk):
    desk.fault(mode="rate_limit", retry_after=7)
    response = create(desk, key="r")
    assert_error(response, 429)
    assert response.headers["Retry-After"] == "7"
    assert desk.tickets() == []
    assert create(desk, key="r").status_code == 201  # count defaults to 1


def test_latency_fault(desk):
    desk.fault(mode="latency", ms=300)
    for key in ("l1", "l2"):  # every POST until cleared
        started = time.monotonic()
        assert create(desk, key=key).status_code == 201
        assert time.monotonic() - started >= 0.3
    assert len(desk.faults()) == 1
    desk.clear_faults()
    # Cleared: a request no longer waits (the read timeout lies far below the
    # latency a fault left in place would add, whatever the machine's load).
    desk.fault(mode="latency", ms=30_000)
    desk.clear_faults()
    assert create(desk, key="l3", timeout=15).status_code == 201


def test_commit_then_drop_fault(desk):
    desk.fault(mode="commit_then_drop")
    with pytest.raises(requests.ConnectionError):
        create(desk, key="d")

    # The change happened although nobody heard about it.
    [ticket] = desk.tickets(idempotency_key="d")
    assert [(e["path"], e["idempotency_key"], e["status"]) for e in desk.ledger()] == [("/tickets", "d", 201)]

    retry = create(desk, key="d")  # the retry with the same key is safe
    assert retry.status_code == 200
    assert retry.json()["id"] == ticket["id"]
    assert len(desk.tickets()) == 1


def test_commit_then_drop_on_comment_and_close(desk):
    ticket = create(desk, key="t").json()
    desk.fault(mode="commit_then_drop", count=2)
    with pytest.raises(requests.ConnectionError):
        desk.request("POST", f"/tickets/{ticket['id']}/comments", json={"body": "hi"}, headers={"Idempotency-Key": "x"})
    with pytest.raises(requests.ConnectionError):
        desk.request("POST", f"/tickets/{ticket['id']}/close")
    stored = desk.ticket(ticket["id"])
    assert stored["status"] == "closed"
    assert [c["body"] for c in stored["comments"]] == ["hi"]
    assert [e["status"] for e in desk.ledger()] == [201, 201, 200]


def test_ignore_idempotency_fault(desk):
    desk.fault(mode="ignore_idempotency")
    first = create(desk, key="dup")
    second = create(desk, key="dup")
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]

    found = desk.tickets(idempotency_key="dup")
    assert [t["id"] for t in found] == [first.json()["id"], second.json()["id"]]
    assert len(desk.ledger()) == 2

    desk.clear_faults()
    third = create(desk, key="dup")
    assert third.status_code == 200
    assert third.json()["id"] == first.json()["id"]


def test_faults_are_used_in_order_and_spare_the_faults_endpoint(desk):
    desk.fault(mode="error", status=500)
    desk.fault(mode="rate_limit", retry_after=1)  # POST /_faults is not itself faulted
    assert [f["mode"] for f in desk.faults()] == ["error", "rate_limit"]
    assert create(desk, key="o").status_code == 500
    assert create(desk, key="o").status_code == 429
    assert create(desk, key="o").status_code == 201


def test_delete_faults_clears_all(desk):
    desk.fault(mode="error", status=503, count=5)
    desk.fault(mode="latency", ms=30_000)
    desk.fault(mode="ignore_idempotency")
    assert len(desk.faults()) == 3
    response = desk.request("DELETE", "/_faults")
    assert response.status_code == 200
    assert desk.faults() == []
    # A latency fault left in place would outlast the read timeout.
    assert create(desk, key="ok", timeout=15).status_code == 201


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"mode": "explode"},
        {"mode": "error", "status": "503"},
        {"mode": "error", "status": 200},
        {"mode": "error", "count": 0},
        {"mode": "rate_limit", "retry_after": -1},
        {"mode": "latency"},
        {"mode": "latency", "ms": "slow"},
        {"mode": "commit_then_drop", "count": 1.5},
        {"mode": "error", "stauts": 503},
    ],
)
def test_bad_fault_spec_is_400(desk, spec):
    assert_error(desk.request("POST", "/_faults", json=spec), 400)
    assert desk.faults() == []


def test_reset_wipes_everything(desk):
    create(desk, key="a")
    desk.fault(mode="latency", ms=10)
    desk.reset()
    assert desk.tickets() == desk.ledger() == desk.faults() == []
    assert create(desk, key="a").json()["id"] == 1


# -- storage ------------------------------------------------------------------


def test_data_survives_restart_and_sigkill(own_desk):
    desk = own_desk.start()
    assert f"ticket desk listening on {desk.url} (data " in desk.output()
    ticket = create(desk, key="keep").json()
    desk.request("POST", f"/tickets/{ticket['id']}/comments", json={"body": "noted"})

    assert desk.stop() == 0  # SIGTERM is a clean exit
    desk.start()
    assert desk.ticket(ticket["id"])["comments"][0]["body"] == "noted"
    assert create(desk, key="keep").status_code == 200  # the key survived too

    second = create(desk, key="crash").json()
    desk.kill()  # SIGKILL straight after the 201: it must already be on disk
    desk.start()
    assert [t["id"] for t in desk.tickets()] == [ticket["id"], second["id"]]
    assert len(desk.ledger()) == 3
    assert create(desk, key="crash").status_code == 200
    assert desk.stop() == 0
