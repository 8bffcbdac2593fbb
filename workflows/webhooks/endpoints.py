"""Operators' webhook endpoints: each receives every event of its team's
plans (docs/explanation/teams.md#teams), signed with a secret of its own that is shown once, when
made or rotated."""

from __future__ import annotations

from django.db import transaction

from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.errors import DomainError
from workflows.models import Team
from workflows.webhooks import keys, outbound
from workflows.webhooks.models import WebhookEndpoint

EDITABLE = ("url", "description", "enabled")


class EndpointInvalid(DomainError):
    code = "invalid"

    def __init__(self, fields: dict[str, str]):
        super().__init__("The endpoint is not valid.")
        self.fields = fields


def _check(changes: dict) -> None:
    if "url" in changes and (problem := outbound.url_problem(changes["url"])):
        raise EndpointInvalid({"url": problem})
    refuse_credentials(description=changes.get("description"))


def team_for(user, name: str | None) -> Team:
    """The team an endpoint `user` makes is for: `name`, one of the user's
    teams; none named, the user's only team."""
    mine = Team.objects.visible_to(user)
    if name is None:
        only = list(mine.order_by("name")[:2])
        if len(only) != 1:
            raise EndpointInvalid({"team": "Name the team whose plans' events this endpoint receives."})
        return only[0]
    team = mine.filter(name=name).first()
    if team is None:
        raise EndpointInvalid({"team": "Not one of your teams."})
    return team


def create(
    *, by, url: str, description: str = "", enabled: bool = True, team: str | None = None
) -> tuple[WebhookEndpoint, str]:
    """The new endpoint and its secret (returned this once)."""
    _check({"url": url, "description": description})
    chosen = team_for(by, team)
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(
            url=url, description=description, enabled=enabled, created_by=by, team=chosen
        )
        secret = keys.issue(endpoint=endpoint)
        journal.append(
            actor=by,
            verb="webhook_endpoint.created",
            obj_type="webhook_endpoint",
            obj_id=endpoint.pk,
            data={"url": url, "enabled": enabled, "team": chosen.name},
        )
    return endpoint, secret


def update(endpoint: WebhookEndpoint, *, by, changes: dict) -> WebhookEndpoint:
    _check(changes)
    with transaction.atomic():
        for name, value in changes.items():
            setattr(endpoint, name, value)
        endpoint.save(update_fields=list(changes))
        journal.append(
            actor=by,
            verb="webhook_endpoint.changed",
            obj_type="webhook_endpoint",
            obj_id=endpoint.pk,
            data={name: changes[name] for name in changes},
        )
    return endpoint


def rotate_secret(endpoint: WebhookEndpoint, *, by) -> str:
    """A new secret; the old one keeps signing for WEBHOOK_ROTATION_HOURS."""
    with transaction.atomic():
        secret = keys.issue(endpoint=endpoint, rotate=True)
        journal.append(
            actor=by, verb="webhook_endpoint.secret_rotated", obj_type="webhook_endpoint", obj_id=endpoint.pk, data={}
        )
    return secret


def delete(endpoint: WebhookEndpoint, *, by) -> None:
    """Removes the endpoint with its secrets and its deliveries, sent or not."""
    with transaction.atomic():
        journal.append(
            actor=by,
            verb="webhook_endpoint.deleted",
            obj_type="webhook_endpoint",
            obj_id=endpoint.pk,
            data={"url": endpoint.url},
        )
        endpoint.delete()
