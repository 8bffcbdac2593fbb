"""The project's tables: the only source of truth for durable work.

Statuses are never assigned directly; `workflows.engine.transitions.move` changes
them and writes the audit event in the same transaction.

One module a concern; every model is imported from here (`from workflows.models
import Workflow`), which is also what registers them, the webhook tables of
`workflows.webhooks.models` included, with the `workflows` app.
"""

from workflows.models.analytics import DecisionAction, DecisionQuerySet, DecisionRecord, Outcome
from workflows.models.archives import Archive, ArchivedWorkflow, ArchivedWorkflowQuerySet
from workflows.models.audit import (
    TEAM_SCOPED_EVENTS,
    AuditCheckpoint,
    AuditCheckpointHead,
    AuditEvent,
    AuditEventQuerySet,
    AuditHead,
    AuditVerification,
)
from workflows.models.chat import ChatMessage, ChatMessageQuerySet
from workflows.models.chat_identity import SlackIdentity, SlackSignature, UsedSlackLink
from workflows.models.delegation import Delegation, DelegationQuerySet
from workflows.models.grants import GrantUse, StandingGrant, StandingGrantQuerySet
from workflows.models.identity import AccountLink, AgentOwner, ApiToken, ProviderIdentity, Team, TeamQuerySet
from workflows.models.jobs import Job, JobItem, JobQuerySet
from workflows.models.plans import (
    Attempt,
    PlanRevision,
    Step,
    StepQuerySet,
    Workflow,
    WorkflowQuerySet,
    operation_key_for,
)
from workflows.models.policies import ActionPolicy, ActionThrottle, PolicyChange, PolicySet, PolicySetVersion
from workflows.models.recovery import Compensation, CompensationQuerySet, DeadLetter, DeadLetterQuerySet, Trace
from workflows.models.review import Approval, GateApproval, ReviewNotice, UsedReviewLink
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookSecret

__all__ = [
    # chat
    "ChatMessage",
    "ChatMessageQuerySet",
    # plans
    "WorkflowQuerySet",
    "Workflow",
    "operation_key_for",
    "StepQuerySet",
    "Step",
    "Attempt",
    "PlanRevision",
    # review
    "Approval",
    "GateApproval",
    "ReviewNotice",
    "UsedReviewLink",
    # recovery
    "CompensationQuerySet",
    "Compensation",
    "Trace",
    "DeadLetterQuerySet",
    "DeadLetter",
    # policies
    "ActionPolicy",
    "ActionThrottle",
    "PolicyChange",
    "PolicySet",
    "PolicySetVersion",
    # standing grants
    "StandingGrantQuerySet",
    "StandingGrant",
    "GrantUse",
    # jobs
    "JobQuerySet",
    "Job",
    "JobItem",
    # audit
    "AuditEventQuerySet",
    "TEAM_SCOPED_EVENTS",
    "AuditEvent",
    "AuditHead",
    "AuditCheckpoint",
    "AuditCheckpointHead",
    "AuditVerification",
    # identity
    "DelegationQuerySet",
    "Delegation",
    "TeamQuerySet",
    "Team",
    "ProviderIdentity",
    "AccountLink",
    "AgentOwner",
    "ApiToken",
    # chat
    "SlackIdentity",
    "SlackSignature",
    "UsedSlackLink",
    # archives
    "Archive",
    "ArchivedWorkflowQuerySet",
    "ArchivedWorkflow",
    # analytics
    "Outcome",
    "DecisionQuerySet",
    "DecisionRecord",
    "DecisionAction",
    # webhooks
    "WebhookEndpoint",
    "WebhookSecret",
    "WebhookDelivery",
]
