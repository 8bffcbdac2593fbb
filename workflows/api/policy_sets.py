"""Teams' Cedar policy sets: proposing a version, reading the live one and
its history, and evaluating a plan against them (docs/explanation/policies.md#policies).
A proposal is authorized or declined as every policy change,
`POST /api/v1/policy-changes/{id}/authorize` and `/decline`."""

from datetime import datetime
from uuid import UUID

from django.contrib.auth import get_user_model
from django.http import Http404
from ninja import Field, Router, Schema, Status

from workflows import roles, teams
from workflows.api import lookup
from workflows.api.policies import PolicyChangeOut, policy_change_out
from workflows.api.workflows import StepIn
from workflows.errors import NotAllowed
from workflows.operations import plans, policy_sets

router = Router()


class ProposalIn(Schema):
    text: str = Field(..., description="The whole Cedar policy set; every policy with an @id")
    reason: str = ""


class VersionOut(Schema):
    version: int
    state: str = Field(..., description="PROPOSED, LIVE, SUPERSEDED or DECLINED")
    text: str
    proposed_by: str
    authorized_by: str | None = Field(None, description="Who authorized (or declined) it")
    created_at: datetime
    decided_at: datetime | None
    change: UUID = Field(..., description="Its policy change, authorized or declined at /policy-changes/{id}")


class PolicySetOut(Schema):
    name: str
    live: VersionOut | None
    history: list[VersionOut] = Field(..., description="Every version proposed, newest first")


class EvaluatedPlanIn(Schema):
    steps: list[StepIn] = Field(..., min_length=1, max_length=plans.MAX_STEPS)


class EvaluateIn(Schema):
    plan: EvaluatedPlanIn
    agent: str = Field(..., max_length=150, description="The agent's username")


class StepDecisionOut(Schema):
    key: str
    decision: str = Field(..., description="auto, human or forbid")
    approvals: int | None = Field(None, description="Approvals the determining permits ask of humans")
    group: str | None = Field(None, description="The first reviewer group the determining permits name")
    groups: list[str] = Field(
        default_factory=list, description="Every reviewer group the determining permits name; approvers must be in all"
    )
    policies: list[str] = Field(..., description="The @id of each policy that decided")
    error: str | None = Field(None, description="policy_error when a policy could not be evaluated on the step")
    reason: str | None = Field(
        None,
        description="Why: permitted, no_policy_set, no_permit, auto_forbidden, reference, destructive, annotation, "
        "action_policy, forbidden, policy_error",
    )
    why: str = Field("", description="The reason in words, naming the policies")


class EvaluationOut(Schema):
    version: int | None = Field(..., description="The live version of the team's set; null when it has none")
    basis: str | None = Field(
        None,
        description="When every step is auto: the basis an approval by policy would name, "
        "`policy:<team>:<@id,...>@<version>`; else null",
    )
    steps: list[StepDecisionOut]


def version_out(version) -> dict:
    change = version.change
    return {
        "version": version.version,
        "state": version.state(),
        "text": version.text,
        "proposed_by": version.proposed_by.get_username(),
        "authorized_by": change.decided_by.get_username() if change.decided_by else None,
        "created_at": version.created_at,
        "decided_at": change.decided_at,
        "change": change.pk,
    }


@router.post(
    "/policy-sets/{team}/versions",
    response={202: PolicyChangeOut},
    summary="Propose a version of a team's Cedar policy set (operators of the team; `global`: the global "
    "set, forbids only); 400 with Cedar's message and line; a reviewer of the team authorizes it",
)
def propose_version(request, team: str, payload: ProposalIn):
    change = policy_sets.propose(team, by=request.user, text=payload.text, reason=payload.reason)
    return Status(202, policy_change_out(lookup.policy_change(request, change.pk)))


@router.get(
    "/policy-sets/{team}",
    response=PolicySetOut,
    summary="A team's Cedar policy set: the live version and its history (its people; `global`: everyone's)",
)
def get_policy_set(request, team: str):
    if not teams.is_staff_role(request.user):
        raise NotAllowed("Your role does not read policy sets.")
    found = policy_sets.show(team, reader=request.user)
    return {
        "name": found["name"],
        "live": version_out(found["live"]) if found["live"] else None,
        "history": [version_out(v) for v in found["history"]],
    }


@router.post(
    "/policies/evaluate",
    response=EvaluationOut,
    summary="How the live policy sets decide each step of a plan for an agent (reviewers and operators of "
    "the agent's team; an agent for itself)",
)
def evaluate(request, payload: EvaluateIn):
    agent = get_user_model().objects.filter(username=payload.agent, is_active=True).first()
    if agent is None or not roles.is_agent(agent):
        raise Http404
    team = plans.submitting_team(request.user if agent.pk == request.user.pk else agent)
    if agent.pk != request.user.pk and not (
        (roles.is_reviewer(request.user) or roles.is_operator(request.user)) and teams.in_team(request.user, team.pk)
    ):
        raise Http404
    body = payload.plan.dict()
    result = policy_sets.evaluate(body, agent=agent.get_username(), team=team.name)
    return {
        "version": result.version,
        "basis": result.basis,
        "steps": [
            {
                "key": s.key,
                "decision": s.decision,
                "approvals": s.approvals,
                "group": s.group,
                "groups": s.groups,
                "policies": s.policies,
                "error": s.error,
                "reason": s.reason,
                "why": s.why,
            }
            for s in result.steps
        ],
    }
