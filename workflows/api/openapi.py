"""The API's OpenAPI document: error shapes on every operation, the actions'
args schemas, and operation ids that stay the same for generated clients."""

import json
import re

from django.shortcuts import render
from ninja import NinjaAPI
from ninja.openapi import docs
from ninja.operation import Operation

from workflows import actions
from workflows.actions import catalog

ERROR_RESPONSES = {
    "400": "Invalid input: see error.fields",
    "401": "Missing or invalid bearer token",
    "403": "Not allowed for your role",
    "404": "No such object (or not visible to you)",
    "409": "Conflict with the object's current state",
    "410": "The workflow was archived (`manage.py archive`): the message says when",
    "413": "Request body too large",
}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}


ARGS_DESCRIPTION = (
    "The arguments of the step's action, checked strictly against that action's schema (the "
    "`<action>.args` components; `args_schema` in GET /api/v1/actions) and stored exactly as sent."
)


def _args_components(components: dict) -> list[dict]:
    """Each installed action's args schema as a component `<action>.args`
    (its nested models `<action>.args.<Model>`); a $ref to each."""
    refs = []
    for name in actions.names():
        component = re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".args"
        schema = catalog.args_schema(actions.get(name), ref_template=f"#/components/schemas/{component}.{{model}}")
        for model, definition in schema.pop("$defs", {}).items():
            components[f"{component}.{model}"] = definition
        components[component] = schema
        refs.append({"$ref": f"#/components/schemas/{component}"})
    return refs


class Swagger(docs.Swagger):
    """The API's docs page with Swagger UI's files as this site serves them.
    django-ninja serves those only when it is a listed app and otherwise
    loads them from a CDN; it is not one here (settings.NINJA_DIR)."""

    def render_page(self, request, api, **kwargs):
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        # Bearer tokens only, never a session cookie: no CSRF token to send.
        context = {"swagger_settings": json.dumps(self.settings, indent=1), "api": api, "add_csrf": False}
        return render(request, self.template, context)


class DurableAPI(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """Every operation documents the error shape it may answer with, and
        a plan's step args point at the schemas of the actions' args."""
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema["paths"].values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for code, description in ERROR_RESPONSES.items():
                    responses.setdefault(
                        code,
                        {
                            "description": description,
                            "content": {"application/json": {"schema": ERROR_SCHEMA}},
                        },
                    )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        refs = _args_components(components)
        for holder in ("StepIn", "CompensationIn"):
            components[holder]["properties"]["args"].update(description=ARGS_DESCRIPTION, anyOf=refs)
        return schema

    def get_openapi_operation_id(self, operation: Operation) -> str:
        # The ids clients were generated from, named when every operation
        # lived in the module workflows/web/api.py: moving one keeps its id.
        return f"workflows_web_api_{operation.view_func.__name__}"
