"""The evaluation of plans by Cedar policy sets, in process
(docs/explanation/policies.md#evaluation): references are found however a
policy reaches them, Cedar's JSON escapes never come from a plan, and the
bounds hold only where policies are live."""

from datetime import UTC, datetime

import pytest

from workflows.operations import plans
from workflows.policy import evaluation, text
from workflows.policy.evaluation import LiveSet, PlanTooLarge, evaluate

NOW = datetime(2026, 12, 10, 10, tzinfo=UTC)


def decide(text, args, action="ticket.create"):
    body = {"steps": [{"key": "s", "action": action, "args": args}]}
    return evaluate(body, agent="bot", team="t", sets=[LiveSet("t", 1, text)], now=NOW).steps[0]


def test_a_reference_reached_through_an_expression_still_counts_as_touched():
    text = (
        '@id("p")\npermit(principal, action == Action::"auto_approve", resource)\n'
        "unless { (if context.hour > 100 then resource else resource).args has title && "
        '(if context.hour > 100 then resource else resource).args.title == "prod" };\n'
    )
    assert decide(text, {"title": "plain"}).decision == "auto"
    assert decide(text, {"title": {"$secret": "NAME"}}).decision == "human"


def test_a_plan_cannot_name_an_entity_through_cedars_json_escapes():
    text = (
        '@id("p")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'unless { resource.args has title && resource.args.title == "x" };\n'
    )
    hostile = {"title": {"__entity": {"type": "Team", "id": "t"}}}
    assert decide(text, hostile).decision == "human"


def test_a_value_cedar_cannot_hold_is_unknown_not_absent():
    text = (
        '@id("p")\npermit(principal, action == Action::"auto_approve", resource)\nunless { resource.args has title };\n'
    )
    assert decide(text, {"title": None}).decision == "human"
    assert decide(text, {"title": 1.5}).decision == "human"
    assert decide(text, {}).decision == "auto"


def test_bounds_apply_where_policies_are_live():
    huge = {"steps": [{"key": "s", "action": "noop", "args": {"x": "y" * 600_000}}]}
    assert evaluate(huge, agent="bot", team="t", sets=[], now=NOW).steps[0].decision == "human"
    live = [LiveSet("t", 1, '@id("p")\npermit(principal, action, resource);')]
    with pytest.raises(PlanTooLarge):
        evaluate(huge, agent="bot", team="t", sets=live, now=NOW)


def test_a_live_set_the_schema_no_longer_accepts_refuses_every_step():
    stale = '@id("p")\nforbid(principal, action, resource) when { resource.gone == 1 };\n'
    step = decide(stale, {"title": "t"})
    assert (step.decision, step.error) == ("forbid", "policy_error")


def test_args_nested_deeper_than_python_recurses_are_refused_with_the_bound():
    deep = "x"
    for _ in range(100_000):
        deep = {"a": deep}
    live = [LiveSet("t", 1, '@id("p")\npermit(principal, action, resource);')]
    with pytest.raises(PlanTooLarge, match="nest at most 16 levels"):
        evaluate(
            {"steps": [{"key": "s", "action": "noop", "args": {"d": deep}}]}, agent="bot", team="t", sets=live, now=NOW
        )
    # A reference at the deepest level allowed is a reference, not one level more.
    at_bound = {"$from": "s.result.x"}
    for _ in range(evaluation.MAX_DEPTH - 1):
        at_bound = {"a": at_bound}
    assert decide('@id("p")\npermit(principal, action, resource);', at_bound).decision == "auto"


def test_more_steps_than_a_plan_may_have_are_refused_with_the_bound():
    assert evaluation.MAX_STEPS >= plans.MAX_STEPS  # no plan the API takes is refused here
    live = [LiveSet("t", 1, '@id("p")\npermit(principal, action, resource);')]
    steps = [{"key": f"s{n}", "action": "noop", "args": {}} for n in range(evaluation.MAX_STEPS + 1)]
    with pytest.raises(PlanTooLarge, match=f"at most {evaluation.MAX_STEPS} steps; this one has"):
        evaluate({"steps": steps}, agent="bot", team="t", sets=live, now=NOW)


def test_a_plan_at_every_bound_is_decided_under_a_set_at_its_bounds():
    """The largest set a team may have (every policy reading the args, with
    `like`) against the largest plan: decided, step by step, not refused."""
    policies = "".join(
        f'@id("p{n}")\npermit(principal, action == Action::"auto_approve", resource)\n'
        f'when {{ resource.args has title && resource.args.title like "*{n}*x*" }};\n'
        for n in range(text.MAX_POLICIES)
    )
    assert len(policies) <= text.MAX_TEXT_CHARS
    title = "y" * (evaluation.MAX_PLAN_CHARS // evaluation.MAX_STEPS - 200)
    steps = [{"key": f"s{n}", "action": "ticket.create", "args": {"title": title}} for n in range(evaluation.MAX_STEPS)]
    decided = evaluate({"steps": steps}, agent="bot", team="t", sets=[LiveSet("t", 1, policies)], now=NOW)
    assert [step.decision for step in decided.steps] == ["human"] * evaluation.MAX_STEPS
