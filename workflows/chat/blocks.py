"""What a Slack message shows (docs/guides/slack-reviewers.md#what-the-message-shows):
a plan, a gate or a compensation as it stands when the worker renders it,
in Block Kit blocks within Slack's limits.

Every text that comes from a plan (its name, keys, args, previews, results,
comments) is escaped for Slack's mrkdwn and marked `verbatim`, so that it
cannot mention anyone, link anywhere or name a channel. Previews carry
secrets only as `secret:NAME` references (docs/explanation/trust-core.md#trust-core).
What does not fit is cut, and a cut message offers only Open: nobody
decides in Slack on what Slack could not show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings
from django.urls import reverse

from workflows.chat import buttons
from workflows.engine import choices, gates, policy
from workflows.models import Approval, AuditEvent, ChatMessage, Compensation, GateApproval, Step, Workflow
from workflows.states import CompensationStatus, PreviewState, StepStatus, WorkflowStatus

# Slack's limits (api.slack.com/reference/block-kit/blocks), and the share
# of them a message of ours may take.
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FALLBACK_TEXT = 3000
# Blocks around the steps: title, context, status, actions, and the line
# that says what was cut.
FRAME_BLOCKS = 6
CUT = "… _(cut: open the console to see all of it)_"


def escape(text) -> str:
    """Slack's three control characters escaped (api.slack.com/reference/surfaces/formatting#escaping)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class Message:
    text: str
    blocks: list[dict]
    # Whether the buttons that decide are offered.
    decidable: bool

    def __post_init__(self):
        # The fallback text is what notifications show, parsed as mrkdwn
        # too: escaped like the blocks.
        self.text = escape(self.text)


class _Fit:
    """Collects step sections within Slack's limits, noting what was cut."""

    def __init__(self, room: int):
        self.room = room
        self.blocks: list[dict] = []
        self.cut = False

    def section(self, text: str) -> None:
        if len(self.blocks) >= self.room:
            self.cut = True
            return
        if len(text) > MAX_SECTION_TEXT:
            text = text[: MAX_SECTION_TEXT - len(CUT)] + CUT
            self.cut = True
        self.blocks.append(_section(text))


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text, "verbatim": True}}


def _context(*items: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": item, "verbatim": True} for item in items]}


def _url(name: str, **kwargs) -> str:
    return f"{settings.CONSOLE_URL}{reverse(name, kwargs=kwargs)}"


def _open(url: str) -> dict:
    return {"type": "button", "action_id": "open", "text": {"type": "plain_text", "text": "Open"}, "url": url}


def _decide(action_id: str, label: str, value: str, style: str) -> dict:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "value": value,
        "style": style,
    }


def _actions(url: str, *deciding: dict) -> dict:
    return {"type": "actions", "block_id": "decide", "elements": [*deciding, _open(url)]}


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def _code(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True)
    return f"```{escape(text)}```"


def render(message: ChatMessage) -> Message:
    workflow = Workflow.objects.select_related("submitted_by", "team").get(pk=message.workflow_id)
    if message.kind == ChatMessage.Kind.GATE:
        return _gate(workflow, Step.objects.get(workflow=workflow, lane=0, key=message.key))
    if message.kind == ChatMessage.Kind.COMPENSATION:
        return _compensation(workflow, Compensation.objects.select_related("requested_by").get(pk=message.key))
    return _plan(workflow)


def _step_text(step: Step) -> str:
    head = f"*{step.position + 1}. {escape(step.key)}* `{escape(step.action)}`"
    if step.preview_state == PreviewState.READY and step.preview:
        text = f"{head}\n{escape(step.preview.get('summary', ''))}"
        if settings.SLACK_PREVIEWS == "full":
            shown = step.preview.get("request") or step.preview.get("details")
            if shown:
                text += "\n" + _code(shown)
        return text
    if step.preview_state == PreviewState.PENDING:
        return f"{head}\n_preview being taken_"
    if step.preview_state == PreviewState.FAILED:
        return f"{head}\n_preview failed: {escape(step.preview_failure_class)}_"
    return f"{head}\n{_code(step.args)}" if settings.SLACK_PREVIEWS == "full" else head


def _outcome(workflow: Workflow) -> str | None:
    """Who decided and how, once the plan no longer waits for review."""
    if workflow.status == WorkflowStatus.PLANNED:
        return None
    if workflow.status == WorkflowStatus.REJECTED:
        rejection = (
            Approval.objects.filter(workflow=workflow, decision=Approval.Decision.REJECT)
            .select_related("reviewer")
            .order_by("-created_at")
            .first()
        )
        if rejection is not None:
            comment = f": {escape(rejection.comment)}" if rejection.comment else ""
            return f":x: *Rejected* by {escape(rejection.reviewer.get_username())}{comment}"
    if workflow.status in (WorkflowStatus.EXPIRED, WorkflowStatus.CANCELLED, WorkflowStatus.REJECTED):
        event = (
            AuditEvent.objects.filter(workflow_id=workflow.pk, object_type="workflow", object_id=str(workflow.pk))
            .filter(verb__in=["workflow.expired", "workflow.cancelled", "workflow.rejected"])
            .order_by("-at")
            .first()
        )
        by = f" by {escape(event.actor)}" if event is not None and workflow.status != WorkflowStatus.EXPIRED else ""
        word = {"EXPIRED": "Expired", "CANCELLED": "Cancelled", "REJECTED": "Rejected"}[workflow.status]
        return f":no_entry_sign: *{word}*{by}"
    approvers = _approvers(workflow)
    return f":white_check_mark: *Approved* by {escape(', '.join(approvers))} (now {workflow.status.lower()})"


def _escalated(workflow: Workflow) -> list[str]:
    """The deadline passed and the plan went to its escalation group, its
    deadline extended (docs/explanation/review.md#on-expiry)."""
    if workflow.escalated_at is None:
        return []
    return [f":rotating_light: Escalated to {escape(workflow.review['escalate_to'])}, deadline extended"]


def _approvers(workflow: Workflow) -> list[str]:
    """Who approved this revision, in order, each once."""
    names = (
        Approval.objects.filter(workflow=workflow, decision=Approval.Decision.APPROVE, revision=workflow.revision)
        .order_by("created_at")
        .values_list("reviewer__username", "basis")
    )
    # An approval no person made is named by its basis.
    return list(dict.fromkeys(name or basis for name, basis in names))


def _about(workflow: Workflow) -> dict:
    """Whose plan, which team's, at which revision, decided by when."""
    return _context(
        f"Agent: *{escape(workflow.submitted_by.get_username())}*",
        f"Team: {escape(workflow.team.name)}",
        f"Revision {workflow.revision}",
        f"Decide by {_when(workflow.deadline)}",
        *_escalated(workflow),
    )


def _plan(workflow: Workflow) -> Message:
    steps = list(workflow.steps.filter(lane=0).order_by("position"))
    url = _url("workflow_detail", workflow_id=workflow.pk)
    title = f"*<{url}|{escape(workflow.name)}>*"
    blocks = [
        _section(f":clipboard: Plan awaiting review: {title}"),
        _about(workflow),
    ]
    fit = _Fit(MAX_BLOCKS - FRAME_BLOCKS)
    for step in steps:
        fit.section(_step_text(step))
    blocks += fit.blocks
    if fit.cut:
        shown = len(fit.blocks)
        blocks.append(_context(f"_Cut to fit Slack ({shown} of {len(steps)} steps shown): decide in the console._"))
    outcome = _outcome(workflow)
    waiting = workflow.status == WorkflowStatus.PLANNED
    if outcome is not None:
        blocks.append(_section(f"{outcome}\n<{url}|Open in the console>"))
        return Message(f"{workflow.name}: {workflow.status.lower()}", blocks, False)
    pending = any(step.preview_state == PreviewState.PENDING for step in steps)
    in_chat = policy.chat_decisions(policy.policies_for({step.action for step in steps}).values())
    approvers = _approvers(workflow)
    if approvers:
        blocks.append(_context(f"Approved so far by {escape(', '.join(approvers))}"))
    why = _only_open(cut=fit.cut, pending=pending, in_chat=in_chat)
    if why:
        blocks.append(_context(why))
        blocks.append(_actions(url))
    else:
        value = buttons.plan_value(workflow, steps)
        blocks.append(
            _actions(
                url,
                _decide(buttons.APPROVE, "Approve", value, "primary"),
                _decide(buttons.REJECT, "Reject", value, "danger"),
            )
        )
    text = f"Plan awaiting review: {workflow.name}" if waiting else workflow.name
    return Message(text, blocks, not why)


def _only_open(*, cut: bool, pending: bool, in_chat: bool, typed: bool = False) -> str:
    """Why the message offers only Open, or "" when it may be decided here."""
    if not in_chat:
        return "_An action of this plan is decided in the console only._"
    if typed:
        # A button carries no choice or input (docs/explanation/review.md#typed-decisions).
        return "_This gate asks for a choice or an input: decide in the console._"
    if cut:
        return "_Too long for Slack: decide in the console._"
    if pending:
        return "_Previews are being taken: the buttons come when they are ready._"
    return ""


def _gate(workflow: Workflow, step: Step) -> Message:
    url = _url("workflow_detail", workflow_id=workflow.pk)
    blocks = [
        _section(f":vertical_traffic_light: Gate waiting: *{escape(step.key)}* of *<{url}|{escape(workflow.name)}>*"),
        _about(workflow),
    ]
    fit = _Fit(MAX_BLOCKS - FRAME_BLOCKS)
    for key, status, result in gates.results_shown(step):
        fit.section(f"*{escape(key)}* {escape(status.lower())}\n{_code(result) if result else ''}".rstrip())
    blocks += fit.blocks
    decisions = list(GateApproval.objects.filter(step=step).select_related("reviewer").order_by("created_at"))
    waiting = workflow.status == WorkflowStatus.WAITING_GATE and step.status == StepStatus.WAITING_GATE
    if not waiting:
        rejected = [d for d in decisions if d.decision == GateApproval.Decision.REJECT]
        if rejected:
            outcome = f":x: *Gate rejected* by {escape(rejected[-1].reviewer.get_username())}"
        elif step.gate_opened_at is not None:
            names = ", ".join(d.reviewer.get_username() for d in decisions)
            outcome = f":white_check_mark: *Gate approved* by {escape(names)}"
        else:
            outcome = f":no_entry_sign: *Plan {escape(workflow.status.lower())}*"
        blocks.append(_section(f"{outcome}\n<{url}|Open in the console>"))
        return Message(f"Gate {step.key} of {workflow.name}: decided", blocks, False)
    if decisions:
        names = ", ".join(d.reviewer.get_username() for d in decisions)
        blocks.append(_context(f"Approved so far by {escape(names)} ({len(decisions)} of {gates.required(step)})"))
    policies = policy.policies_for({s["action"] for s in workflow.plan}).values()
    why = _only_open(
        cut=fit.cut, pending=False, in_chat=policy.chat_decisions(policies), typed=choices.typed(step.gate)
    )
    if why:
        blocks += [_context(why), _actions(url)]
    else:
        value = buttons.gate_value(workflow, step)
        blocks.append(
            _actions(
                url,
                _decide(buttons.GATE_APPROVE, "Approve gate", value, "primary"),
                _decide(buttons.GATE_REJECT, "Reject", value, "danger"),
            )
        )
    return Message(f"Gate waiting: {step.key} of {workflow.name}", blocks, not why)


def _compensation(workflow: Workflow, comp: Compensation) -> Message:
    url = _url("compensation_detail", compensation_id=comp.pk)
    blocks = [
        _section(f":rewind: Compensation requested for *<{url}|{escape(workflow.name)}>*"),
        _context(
            f"Requested by *{escape(comp.requested_by.get_username())}*",
            f"Team: {escape(workflow.team.name)}",
        ),
        _section(f"*Reason:* {escape(comp.reason)}"[:MAX_SECTION_TEXT]),
    ]
    fit = _Fit(MAX_BLOCKS - FRAME_BLOCKS - 1)
    for undo in comp.plan:
        fit.section(f"Undo *{escape(undo['compensates'])}* with `{escape(undo['action'])}`")
    for kept in comp.irreversible:
        fit.section(f"*{escape(kept['key'])}* cannot be undone: {escape(kept['why'])}")
    blocks += fit.blocks
    if comp.status != CompensationStatus.REQUESTED:
        decided = (
            AuditEvent.objects.filter(object_type="compensation", object_id=str(comp.pk))
            .filter(verb__in=["compensation.authorized", "compensation.declined"])
            .order_by("-at")
            .first()
        )
        by = decided.actor if decided is not None else ""
        word = "Declined" if comp.status == CompensationStatus.DECLINED else "Authorized"
        reason = f": {escape(comp.decision_reason)}" if comp.decision_reason else ""
        blocks.append(_section(f"*{word}* by {escape(by)}{reason} (now {comp.status.lower()})\n<{url}|Open>"))
        return Message(f"Compensation of {workflow.name}: {comp.status.lower()}", blocks, False)
    policies = policy.policies_for({p["action"] for p in comp.plan}).values()
    why = _only_open(cut=fit.cut, pending=False, in_chat=policy.chat_decisions(policies))
    if why:
        blocks += [_context(why), _actions(url)]
    else:
        value = buttons.compensation_value(comp)
        blocks.append(
            _actions(
                url,
                _decide(buttons.COMP_AUTHORIZE, "Authorize", value, "primary"),
                _decide(buttons.COMP_DECLINE, "Decline", value, "danger"),
            )
        )
    return Message(f"Compensation requested: {workflow.name}", blocks, not why)
