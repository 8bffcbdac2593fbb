"""Every kind of audit event (its `verb`), with what it records.

The one list of them: `manage.py docs_reference` writes
docs/reference/audit-events.md from it, and tests/ops/test_docs.py fails when
code writes a kind that is missing here. A status change made by
`workflows.engine.transitions.move` without a verb of its own is recorded
as `<object>.<new status, lower case>`; those kinds are derived from the
transition table, so that a new status is a documented kind at once.
"""

from workflows.states import TRANSITIONS

# Object kinds of the transition table, as the events name them.
_OBJECTS = {
    "workflow": "The workflow",
    "step": "The step",
    "attempt": "The attempt",
    "compensation": "The compensation",
    "policy_change": "The policy change",
    "grant": "The standing grant",
}

NAMED: dict[str, str] = {
    # Plans and their review
    "workflow.submitted": "An agent submitted a plan; it waits in PLANNED for review.",
    "workflow.revised": "A reviewer replaced some steps' arguments: a new revision, earlier approvals void.",
    "workflow.approval_recorded": "One approval of several required was recorded; the plan still waits.",
    "workflow.approved": "The last required approval was recorded; the plan moves to APPROVED.",
    "workflow.approved_by_policy": "The team's Cedar policies permitted every step auto_approve: approved at "
    "submission with no person (actor `policy:<team>@<version>`), its basis `policy:<team>:<@id,...>@<version>` "
    "and each step's policies in the data.",
    "workflow.approved_by_grant": "Standing grants approved every step the team's policies left to a person "
    "(and the policies the others): approved at submission with no person (actor the first grant's "
    "`grant:<id>`), each step's basis and each grant's grantor in the data.",
    "workflow.rejected": "A reviewer rejected the plan (or a gate of it); nothing more runs.",
    "workflow.previews_requested": "Approval asked the workers to compute the steps' effect previews.",
    "workflow.previewed": "A worker recorded the effect previews of the plan's steps.",
    "workflow.reapproved": "A fresh approval put a workflow with blocked steps back to RUNNING.",
    "workflow.claimed": 'A reviewer claimed the plan ("I\'m on it").',
    "workflow.claim_released": "A reviewer released a claim, or it lapsed.",
    "workflow.assigned": "A reviewer handed the plan to another reviewer.",
    "workflow.cancelled": "The submitter or an operator cancelled the workflow; no new step starts.",
    "reviewers.notified": "Reviewers were told of a plan that awaits review (mail, webhook).",
    "reviewers.reminder": "A plan's review reminder was sent.",
    "reviewers.escalation": "A plan's review was escalated to its escalation group.",
    "workflow.escalated": "A plan's deadline passed undecided and its review says to escalate: it went once to its "
    "escalate_to group, its deadline extended by extend_seconds.",
    "delegation.started": "A reviewer away until a time handed their notices, reminders, escalations and "
    "assignments to a delegate (a replaced delegation ends first).",
    "delegation.ended": "A delegation ended: its reviewer ended it, replaced it, or its time passed (`expired`, "
    "closed by the worker).",
    # Running
    "workflow.started": "A worker took the approved workflow: it is RUNNING.",
    "workflow.waiting_gate": "The run reached a gated step and pauses for its approvals.",
    "workflow.gate_approved": "A gate's last approval: the run goes on.",
    "workflow.resumed": "An operator's replay or resolution put a stopped workflow back to RUNNING.",
    "workflow.stopped": "An operator chose to compensate an in-doubt step: the workflow stops as FAILED.",
    "step.claimed": "A worker claimed the step under a lease with a fencing number.",
    "step.waiting_gate": "The step waits for its gate's approvals.",
    "gate.approval_recorded": "One approval of a gate's several was recorded.",
    "gate.opened": "A gate's approvals are complete: its step goes back in line.",
    "gate.rejected": "A reviewer rejected a gate: the step never runs.",
    "step.skipped": "The step's `when` named another choice than its gate took: it ends SKIPPED, never run.",
    "attempt.requested": "An attempt was committed as REQUESTED, before any effect was sent.",
    "step.lease_expired": "A worker's lease on the step ran out; recovery takes the step over.",
    "step.released": "A draining cluster gave back a claimed step it had not sent yet.",
    "step.reconciled": "A lookup found the effect had happened: the result is recorded as if the call had answered.",
    "attempt.reconciled": "The attempt's unknown outcome was settled by a lookup.",
    "step.unblocked": "A fresh approval lifted a step's policy block.",
    "action.paused": "A receiver said to slow down (429 Retry-After): the action pauses cluster-wide.",
    "dead_letter.created": "A step exhausted its retries or failed for good: it was parked as a dead letter.",
    # Operators
    "step.replayed": "An operator replayed a dead letter with the step's original operation key.",
    "dead_letter.applied": "A reconciliation found a dead letter's effect had happened and recorded it.",
    "dead_letter.discarded": "An operator discarded a dead letter, with a reason.",
    "step.resolution_proposed": "An operator's result for an in-doubt step waits for a second person.",
    "step.resolution_confirmed": "A second person confirmed an operator's proposed result.",
    "step.resolved": "An operator resolved an in-doubt step with evidence.",
    "attempt.resolved": "An operator's resolution settled the attempt's unknown outcome.",
    "step.complete": "The step's effect is verified: it is COMPLETE.",
    "job.reconcile": "An operator started a bulk reconcile of dead letters by filter.",
    "job.replay": "An operator started a bulk replay of dead letters by filter.",
    "job.paused": "An operator paused a bulk job.",
    "job.resumed": "An operator resumed a bulk job.",
    "job.finished": "A bulk job went through every dead letter it selected.",
    # Compensation
    "compensation.requested": "An operator asked to undo completed steps, with a reason.",
    "compensation.authorized": "A reviewer other than the requester authorized the compensation.",
    "compensation.declined": "A reviewer declined the compensation.",
    "compensation.started": "The compensation began: its steps run in reverse order as new effects.",
    "compensation.resumed": "An operator's replay or resolution restarted a halted compensation.",
    "step.compensating": "The step's compensating effect is due.",
    "step.compensated": "The step's compensating effect completed.",
    # Policy
    "policy.changed": "An action's policy changed (a tightening by one operator, or an authorized loosening).",
    "policy_change.requested": "An operator asked to loosen an action's policy; another must authorize.",
    "policy_change.authorized": "Another operator authorized a policy loosening; it applies.",
    "policy_change.declined": "A policy loosening was declined.",
    "policy_set.proposed": "An operator proposed a new version of a team's (or the global) Cedar policy set; a "
    "reviewer of that team, another person, must authorize it.",
    "policy_set.authorized": "A reviewer authorized a proposed policy set version: it is live.",
    "policy_set.declined": "A proposed policy set version was declined.",
    # Standing grants
    "grant.created": "A reviewer granted an agent standing approval of an action's steps under a Cedar condition, "
    "for so many uses until a time; ACTIVE, or PENDING a second reviewer on a destructive or irreversible action.",
    "grant.authorized": "A second reviewer authorized a standing grant of a destructive or irreversible action: "
    "it is ACTIVE.",
    "grant.revoked": "A reviewer or operator revoked a standing grant, with a reason: it approves nothing more, and "
    "the steps it approved stop before their next effect.",
    "grant.expired": "A standing grant's time passed (closed by the worker): it approves nothing more, and the "
    "steps it approved stop before their next effect.",
    "grant.used": "A standing grant approved a step: one use counted for its operation key.",
    "grant.exhausted": "A standing grant's last use was taken: it approves nothing more (the steps it approved "
    "still run).",
    # People, teams, agents
    "user.signed_in": "Someone signed in (local password or the identity provider).",
    "user.breakglass": "An operator let one local account sign in for a limited time while local sign-in is off.",
    "user.signed_out_at_provider": "The provider ended a person's sessions; their agents' tokens were suspended.",
    "agent.enabled": "An agent's suspended tokens were enabled again.",
    "agent.owner_set": "An agent was given the person who owns it (for four-eyes).",
    "person.linked": "Two accounts were grouped as one person, for four-eyes only.",
    "person.slack_linked": (
        "A Slack user of SLACK_TEAM_ID was linked to a console account (by the person's handshake or by hand): "
        "their clicks in Slack decide as that account."
    ),
    "team.created": "A team was created.",
    "team.member_added": "A user joined a team.",
    "team.member_removed": "A user left a team.",
    "team.retention": "A team's audit retention (days before archiving) changed.",
    # Webhooks
    "webhook_secret.rotated": "A user's webhook signing secret was replaced; the old one signs for a while too.",
    "webhook_endpoint.created": "An operator registered a webhook endpoint.",
    "webhook_endpoint.changed": "An operator changed a webhook endpoint.",
    "webhook_endpoint.secret_rotated": "A webhook endpoint got a new signing secret.",
    "webhook_endpoint.deleted": "An operator removed a webhook endpoint.",
    "webhook.dead_lettered": "A webhook delivery ran out of attempts.",
    "webhook.replayed": "An operator replayed a dead-lettered webhook delivery, with the same webhook-id.",
    # The trail itself
    "audit.archived": "Old rows were moved to a signed archive; their streams' heads are recorded here.",
    "audit.restored": "A workflow was brought back, read-only, from an archive.",
}


def _moves() -> dict[str, str]:
    moves = {}
    for kind, table in TRANSITIONS.items():
        for targets in table.values():
            for target in targets:
                moves[f"{kind}.{target.lower()}"] = f"{_OBJECTS[kind]} moved to {target}."
    return moves


# Named kinds first: their meaning is more precise than "moved to".
KINDS: dict[str, str] = dict(sorted({**_moves(), **NAMED}.items()))
