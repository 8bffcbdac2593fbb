"""Every recipe of docs/guides/policy-cookbook.md, live at once, through
`POST /api/v1/policies/evaluate`: the cookbook says what holds."""

import re
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from tests.support.policy_sets import make_live
from workflows.operations import policy_sets

COOKBOOK = Path(settings.BASE_DIR) / "docs" / "guides" / "policy-cookbook.md"
FRIDAY_AFTERNOON = datetime(2026, 12, 11, 14, tzinfo=UTC)
THURSDAY = datetime(2026, 12, 10, 14, tzinfo=UTC)


def recipes() -> str:
    return "\n".join(re.findall(r"```text\n(.*?)```", COOKBOOK.read_text(), re.S))


def decide(api, steps):
    answer = api["reviewer"].post("/policies/evaluate", {"plan": {"steps": steps}, "agent": "agent"})
    assert answer.status_code == 200, answer.content
    return {s["key"]: s for s in answer.json()["steps"]}


def refund(cents):
    return {
        "action": "refunds.refund",
        "args": {"order_id": "o-1", "amount_cents": cents, "currency": "EUR", "reason": "x"},
    }


def test_every_cookbook_recipe_does_what_it_says(api, monkeypatch):
    make_live(api, recipes())
    monkeypatch.setattr(policy_sets, "clock", lambda: THURSDAY)
    steps = decide(
        api,
        [
            {"key": "t", "action": "ticket.create", "args": {"title": "t"}},
            {"key": "small", **refund(5_000)},
            {"key": "big", **refund(200_000)},
            {"key": "huge", **refund(900_000)},
            {"key": "deploy", "action": "http.post", "args": {"url": "https://ci.example.com/deploy/web"}},
        ],
    )
    assert (steps["t"]["decision"], steps["t"]["policies"]) == ("auto", ["auto-harmless"])
    assert (steps["small"]["decision"], steps["small"]["approvals"]) == ("human", None)
    assert (steps["big"]["decision"], steps["big"]["approvals"], steps["big"]["group"]) == ("human", 2, "finance")
    assert (steps["huge"]["decision"], steps["huge"]["policies"]) == ("forbid", ["refund-ceiling"])
    assert steps["deploy"]["decision"] == "human"
    monkeypatch.setattr(policy_sets, "clock", lambda: FRIDAY_AFTERNOON)
    deploy = {"key": "deploy", "action": "http.post", "args": {"url": "https://ci.example.com/deploy/web"}}
    assert decide(api, [deploy])["deploy"]["policies"] == ["no-friday-deploys"]
    many = [{"key": f"s{i}", "action": "noop", "args": {}} for i in range(21)]
    assert {s["decision"] for s in decide(api, many).values()} == {"forbid"}
