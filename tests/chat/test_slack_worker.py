"""Real processes: the console's worker posts to the Slack stand-in, honours
its 429s and catches up, in order, after Slack was unreachable
(docs/guides/slack-admins.md#when-slack-is-slow-down-or-rate-limiting)."""

import time

from tests.support.plans import ticket_plan
from workflows.models import ChatMessage


def submit(api, key) -> str:
    answer = api["agent"].post("/workflows", ticket_plan(key))
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def wait_until(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.1)


def ok_posts(slack) -> list[dict]:
    return [c for c in slack.calls("chat.postMessage") if c["status"] == 200]


def test_the_worker_posts_a_submitted_plan_and_updates_it_after_approval(api, slack, start_worker):
    start_worker(**slack.env)
    workflow_id = submit(api, "worker-1")
    slack.wait_for(lambda calls: "Revision 1" in str(calls), what="the plan's message")

    answer = api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "go"})
    assert answer.status_code == 200, answer.content

    calls = slack.wait_for(lambda calls: "Approved* by reviewer" in str(calls), what="the approval's update")
    assert len(ok_posts(slack)) == 1
    assert calls[-1]["method"] == "chat.update"
    assert calls[-1]["body"]["ts"] == ChatMessage.objects.get(workflow_id=workflow_id).ts


def test_a_429_is_honoured_by_the_worker_and_nothing_is_lost_or_posted_twice(api, slack, start_worker):
    slack.rate_limit(calls=2, retry_after=1)
    start_worker(**slack.env)
    ids = [submit(api, f"worker-limited-{n}") for n in range(3)]

    wait_until(lambda: not ChatMessage.objects.pending().exists() and len(ok_posts(slack)) == 3, "three posts")
    statuses = [c["status"] for c in slack.calls()]
    assert statuses[:2] == [429, 429]  # the fault happened
    rows = ChatMessage.objects.order_by("id")
    assert [str(r.workflow_id) for r in rows] == ids and len({r.ts for r in rows}) == 3


def test_when_slack_is_unreachable_messages_wait_and_catch_up_in_order(api, slack, start_worker):
    start_worker(**slack.env)
    slack.kill()
    first, second = submit(api, "worker-down-1"), submit(api, "worker-down-2")
    answer = api["reviewer"].post(f"/workflows/{first}/approve", {"comment": "while Slack is down"})
    assert answer.status_code == 200, answer.content
    # The worker tried and could not reach Slack (the fault happened).
    wait_until(lambda: ChatMessage.objects.filter(failures__gt=0).exists(), "a failed attempt")
    assert ChatMessage.objects.pending().count() == 2

    slack.start()
    wait_until(lambda: not ChatMessage.objects.pending().exists(), "the catch-up", timeout=90)

    posts = ok_posts(slack)
    assert len(posts) == 2  # each plan posted once
    rows = list(ChatMessage.objects.order_by("id"))
    assert [str(r.workflow_id) for r in rows] == [first, second]
    assert rows[0].ts < rows[1].ts
    # The first was approved before Slack saw it: its one post shows the newest state.
    assert "Approved* by reviewer" in str(posts[0]["body"]["blocks"])
