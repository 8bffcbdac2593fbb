"""The installed actions, as agents need them to write a plan."""

from typing import Any

from ninja import Field, Router, Schema

from workflows.actions import catalog

router = Router()


class ActionOut(Schema):
    name: str
    idempotent: bool
    can_lookup: bool
    destructive: bool
    irreversible: bool
    compensation: str | None
    has_preview: bool
    args_schema: dict[str, Any] = Field(description="The JSON Schema of the action's args")


class ActionList(Schema):
    items: list[ActionOut]


@router.get("/actions", response=ActionList, summary="The installed actions, their flags and the schema of their args")
def list_actions(request):
    return {"items": catalog.catalog()}
