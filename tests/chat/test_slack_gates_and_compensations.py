"""Gates and compensations get messages of their own, with buttons bound to
what the decision names, updated once decided (docs/guides/slack-reviewers.md#gates-and-compensations)."""

from tests.support.plans import gated_plan
from tests.support.running import run_until
from workflows.chat import buttons
from workflows.chat import slack as sending
from workflows.engine import gates
from workflows.models import ChatMessage, Step, Workflow
from workflows.operations import compensation


def actions(blocks) -> dict:
    return {e["action_id"]: e.get("value") for b in blocks if b["type"] == "actions" for e in b["elements"]}


def at_gate(api) -> str:
    submitted = api["agent"].post("/workflows", gated_plan("slack-gate-1"))
    assert submitted.status_code == 201, submitted.content
    workflow_id = submitted.json()["id"]
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {}).status_code == 200
    run_until(workflow_id, "WAITING_GATE")
    return workflow_id


def test_a_waiting_gate_is_posted_and_its_approval_updates_it(api, slack, desk):
    workflow_id = at_gate(api)
    sending.send_due()
    gate_post = next(c for c in slack.calls("chat.postMessage") if "Gate waiting" in str(c["body"]["blocks"]))
    found = actions(gate_post["body"]["blocks"])
    assert set(found) == {"gate_approve", "gate_reject", "open"}
    value = buttons.parse_button_value(found["gate_approve"])
    step = Step.objects.get(workflow_id=workflow_id, key="close")
    assert (value["w"], value["s"], value["d"]) == (workflow_id, "close", gates.results_digest(step))
    click = buttons.decision("gate_approve", found["gate_approve"])
    assert (click.kind, click.step_key, click.seen.results_digest) == ("gate", "close", value["d"])

    answer = api["reviewer2"].post(f"/workflows/{workflow_id}/steps/close/approve", {"comment": "looked"})
    assert answer.status_code == 200, answer.content
    sending.send_due()

    gate_ts = ChatMessage.objects.get(workflow_id=workflow_id, kind="gate").ts
    [update] = [c for c in slack.calls("chat.update") if c["body"]["ts"] == gate_ts]
    assert "Gate approved* by reviewer2" in str(update["body"]["blocks"])
    assert actions(update["body"]["blocks"]) == {}


def test_a_compensation_awaiting_authorization_is_posted_and_its_decline_updates_it(api, slack, desk, people):
    workflow_id = at_gate(api)
    api["reviewer"].post(f"/workflows/{workflow_id}/steps/close/reject", {"comment": "no"})
    comp = compensation.request(Workflow.objects.get(pk=workflow_id), by=people["operator"], reason="undo")
    sending.send_due()
    comp_ts = ChatMessage.objects.get(workflow_id=workflow_id, kind="compensation").ts
    [post] = [c for c in slack.calls("chat.postMessage") if "Compensation requested" in str(c["body"]["blocks"])]
    found = actions(post["body"]["blocks"])
    assert set(found) == {"comp_authorize", "comp_decline", "open"}
    click = buttons.decision("comp_decline", found["comp_decline"])
    assert (click.compensation_id, click.seen.plan_hash) == (comp.pk, compensation.current_hash(comp))

    answer = api["reviewer2"].post(f"/compensations/{comp.pk}/decline", {"reason": "keep the ticket"})
    assert answer.status_code == 200, answer.content
    sending.send_due()

    [update] = [c for c in slack.calls("chat.update") if c["body"]["ts"] == comp_ts]
    assert "Declined* by reviewer2: keep the ticket" in str(update["body"]["blocks"])
    assert actions(update["body"]["blocks"]) == {}


def test_a_button_value_from_elsewhere_is_refused():
    for action_id, raw in [
        ("approve", "not json"),
        ("approve", '{"v": 1, "c": "not-a-uuid", "h": "x"}'),
        ("gate_approve", '{"v": 1, "w": "00000000-0000-0000-0000-000000000000", "r": 1, "h": "x", "p": "y"}'),
        ("delete_everything", '{"v": 1}'),
    ]:
        try:
            buttons.decision(action_id, raw)
        except ValueError:
            continue
        raise AssertionError(f"{action_id} {raw} was accepted")
