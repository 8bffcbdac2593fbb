"""The demo: its users (one per role, password `durable-demo`), a few plans
awaiting review, and work waiting for each role: a gate to pass and a
compensation to authorize (reviewer), a dead letter to replay and an
IN_DOUBT step to resolve (operator), and the history of all of it (auditor).

Each is brought where it waits by the real operations: the agent submits,
reviewer2 approves, the engine runs the steps in this process; a failure is
recorded by the engine from the error an action would have raised, as a
worker records it. Safe to seed again: what still waits is left as it is,
and only what someone has since dealt with is staged anew.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.urls import reverse

from workflows import actions, roles
from workflows.actions import ActionError
from workflows.engine import execution, outcomes, previews
from workflows.models import Compensation, DeadLetter, Step, Workflow
from workflows.operations import approvals, compensation, plans
from workflows.operations.deciding import Seen
from workflows.states import CompensationStatus, FailureClass, StepStatus, WorkflowStatus

PASSWORD = "durable-demo"
USERS = {
    "reviewer": [roles.REVIEWERS],
    "reviewer2": [roles.REVIEWERS],
    "operator": [roles.OPERATORS],
    "auditor": [roles.AUDITORS],
    "agent": [],
    "admin": [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS],
}

SAMPLES = [
    {
        "name": "Open an incident ticket and note the follow-up",
        "submission_key": "demo-incident",
        "context": {"reason": "Disk usage above 90% on db-2"},
        "steps": [
            {
                "key": "open",
                "action": "ticket.create",
                "args": {"title": "Disk usage above 90% on db-2", "body": "Opened by the capacity agent."},
            },
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.id"}, "body": "Cleanup job scheduled for tonight."},
            },
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
        ],
    },
    {
        "name": "Dry run: three no-op steps",
        "submission_key": "demo-noop",
        "steps": [{"key": f"step-{n}", "action": "noop", "args": {"n": n}} for n in range(1, 4)],
    },
    {
        "name": "Customer follow-up ticket <b>with markup in its name</b>",
        "submission_key": "demo-followup",
        "steps": [
            {
                "key": "ticket",
                "action": "ticket.create",
                "args": {"title": "<script>alert('agent text is data')</script>", "body": "Escaped, never run."},
            },
        ],
    },
]


# Plans brought to where someone has to act, each by its function below.
GATED = {
    "name": "Stage the config change, then tell the on-call team",
    "submission_key": "demo-gated",
    "steps": [
        {"key": "stage", "action": "noop", "args": {"change": "raise the connection pool to 40"}},
        {
            "key": "announce",
            "action": "ticket.create",
            "args": {"title": "Connection pool raised to 40", "body": "Staged and checked; rolling out."},
            "gate": {"approvals": 1, "note": "Check the staging step's result before the ticket goes out."},
        },
    ],
}
DEAD_LETTERED = {
    "name": "Open a ticket for the failed backup",
    "submission_key": "demo-dead-letter",
    "steps": [
        {"key": "check", "action": "noop", "args": {"backup": "nightly-db-2"}},
        {"key": "open", "action": "ticket.create", "args": {"title": "Nightly backup of db-2 failed"}},
    ],
}
IN_DOUBT = {
    "name": "Tell the status page about the deploy",
    "submission_key": "demo-in-doubt",
    "steps": [
        {
            "key": "notify",
            "action": "http.post",
            "args": {"url": "https://status.example.com/deploys", "json": {"service": "billing", "version": "2.4"}},
        },
    ],
}
COMPENSABLE = {
    "name": "Reserve capacity for the launch",
    "submission_key": "demo-compensation",
    "steps": [
        {
            "key": f"reserve-{region}",
            "action": "noop",
            "args": {"region": region, "nodes": 4},
            "compensation": {"action": "noop", "args": {"release": region}},
        }
        for region in ("eu", "us")
    ],
}


def _approve(workflow, by) -> None:
    # As a reviewer does: the previews taken first (a step that sends a
    # request is approved only with its preview), then the plan as it is.
    previews.compute(workflow.pk)
    approvals.approve(workflow, by=by, seen=Seen.current(workflow))


def _fail_next_step(workflow, error: ActionError) -> None:
    """Claim the next step, record its attempt, then the error its action
    raised, as a worker does."""
    step = execution.claim(workflow.pk)
    attempt = execution._request_attempt(step, step.fence)
    outcomes.record_failure(step, attempt, actions.get(step.action), error, step.fence)


def _at_gate(workflow, people) -> None:
    _approve(workflow, people["reviewer2"])
    execution.run_workflow(workflow.pk)  # stages, then waits at the gate


def _dead_lettered(workflow, people) -> None:
    _approve(workflow, people["reviewer2"])
    execution.execute(execution.claim(workflow.pk))
    refused = "HTTP 422: field 'priority' is required by the desk's new schema"
    _fail_next_step(workflow, ActionError(FailureClass.INVALID_ARGUMENTS, refused))


def _in_doubt(workflow, people) -> None:
    _approve(workflow, people["reviewer2"])
    unanswered = "sent, no answer within 10 s: the status page may or may not have it"
    _fail_next_step(workflow, ActionError(FailureClass.TIMEOUT, unanswered, outcome_unknown=True))


def _compensation_requested(workflow, people) -> None:
    _approve(workflow, people["reviewer2"])
    execution.run_workflow(workflow.pk)
    workflow.refresh_from_db()
    compensation.request(workflow, by=people["operator"], reason="The launch moved to next quarter.")


def awaiting_review():
    return Workflow.objects.filter(status=WorkflowStatus.PLANNED)


def waiting_gates():
    return Workflow.objects.filter(status=WorkflowStatus.WAITING_GATE)


def open_dead_letters():
    return DeadLetter.objects.filter(status=DeadLetter.Status.OPEN)


def in_doubt_steps():
    return Step.objects.filter(status=StepStatus.IN_DOUBT)


def requested_compensations():
    return Compensation.objects.filter(status=CompensationStatus.REQUESTED)


# What each staged plan leaves waiting, and how it is brought there.
STAGED = [
    (GATED, waiting_gates, _at_gate),
    (DEAD_LETTERED, open_dead_letters, _dead_lettered),
    (IN_DOUBT, in_doubt_steps, _in_doubt),
    (COMPENSABLE, requested_compensations, _compensation_requested),
]


@transaction.atomic
def _users() -> dict:
    User = get_user_model()
    people = {}
    for username, groups in USERS.items():
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(PASSWORD)
            user.is_staff = user.is_superuser = username == "admin"
            user.save()
        user.groups.add(*(Group.objects.get_or_create(name=group)[0] for group in groups))
        people[username] = user
    return people


def _submit(agent, body):
    """Submitted afresh: each time under the next key of its kind."""
    staged = Workflow.objects.filter(submission_key__startswith=f"{body['submission_key']}-").count()
    return plans.submit(agent, {**body, "submission_key": f"{body['submission_key']}-{staged + 1}"}).workflow


def seed() -> None:
    people = _users()
    if not awaiting_review().exists():
        for body in SAMPLES:
            _submit(people["agent"], body)
    for body, waiting, bring in STAGED:
        if not waiting().exists():
            bring(_submit(people["agent"], body), people)


def tasks() -> list[tuple[str, str, str]]:
    """(role, what waits, console path) for the demo's banner: the newest of each."""
    found = []
    review = awaiting_review().count()
    if review:
        found.append(("reviewer", f"{review} plans to review", reverse("inbox")))
    if gate := waiting_gates().order_by("-created_at").first():
        found.append(("reviewer", "a gate to pass", reverse("workflow_detail", args=[gate.pk])))
    if comp := requested_compensations().order_by("-created_at").first():
        found.append(("reviewer", "a compensation to authorize", reverse("compensation_detail", args=[comp.pk])))
    if letter := open_dead_letters().order_by("-created_at").first():
        found.append(("operator", "a dead letter to replay", reverse("dead_letter_detail", args=[letter.pk])))
    if step := in_doubt_steps().order_by("-updated_at").first():
        found.append(("operator", "an IN_DOUBT step to resolve", reverse("workflow_detail", args=[step.workflow_id])))
    found.append(("auditor", "the history of all of it", reverse("audit_list")))
    return found
