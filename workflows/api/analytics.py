"""Decision analytics for reviewers and auditors, over their teams
(docs/guides/analytics.md)."""

from ninja import Field, Router, Schema

from workflows.api import lookup
from workflows.operations import analytics

router = Router()


class AnalyticsTimesOut(Schema):
    p50: float | None
    p95: float | None
    max: float | None


class AnalyticsOutcomesOut(Schema):
    approved: int
    rejected: int
    expired: int
    cancelled: int
    auto: int = Field(..., description="Approvals no person made (a policy's); included in `approved`")
    human: int = Field(0, description="Approvals a person made: `approved` less `auto`")


class AnalyticsOpenAgeOut(Schema):
    older_than_seconds: int
    count: int


class AnalyticsGroupOut(Schema):
    decisions: int = Field(..., description="Approved and rejected")
    approved: int
    auto: int = Field(0, description="Approvals no person made (a policy's); included in `approved`")
    human: int = Field(0, description="Approvals a person made")
    rejected: int
    expired: int
    cancelled: int
    p50: float | None
    p95: float | None
    max: float | None


class AnalyticsTeamOut(AnalyticsGroupOut):
    team: str


class AnalyticsActionOut(AnalyticsGroupOut):
    action: str


class AnalyticsReviewerOut(Schema):
    reviewer: str = Field(..., description="The person (their linked accounts counted as one)")
    name: str = Field(..., description="An account name of that person")
    decisions: int
    approved: int
    rejected: int
    p50: float | None
    p95: float | None
    max: float | None


class AnalyticsOut(Schema):
    since: str
    until: str
    decisions: int = Field(..., description="Plans approved or rejected since `since`")
    time_to_decision_seconds: AnalyticsTimesOut = Field(
        ..., description="From submission to the approval or rejection (percentile_cont), over `decisions`"
    )
    outcomes: AnalyticsOutcomesOut
    open_by_age: list[AnalyticsOpenAgeOut] = Field(
        ..., description="Plans awaiting review now, for longer than each age"
    )
    reminders_sent: int
    escalations_sent: int
    by_team: list[AnalyticsTeamOut]
    by_action: list[AnalyticsActionOut] = Field(..., description="A plan counts once under each action it names")
    by_reviewer: list[AnalyticsReviewerOut]


@router.get(
    "/analytics/decisions",
    response=AnalyticsOut,
    summary="Time to decision, outcomes, the open queue by age and the notices sent, over your teams "
    "(reviewers and auditors); `since` an ISO 8601 time or an age such as 7d (default 30d)",
)
def decision_analytics(request, since: str | None = None, team: str | None = None, action: str | None = None):
    lookup.reads(request, "analytics")
    filters = analytics.parse(request.user, since=since, team=team, action=action)
    return analytics.decisions(request.user, filters)
