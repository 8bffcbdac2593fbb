import json

from django.core.management.base import BaseCommand

from workflows import actions
from workflows.actions import catalog, registry
from workflows.actions.checks import FLAGS


def describe(name: str) -> dict:
    action = actions.get(name)
    # getattr: a flag an older action class predates reads as off.
    flags = {flag: getattr(action, flag, False) for flag in FLAGS}
    # As approval applies it: an action that builds its request waits for its preview too.
    flags["preview_required"] = action.waits_for_preview
    return {
        "name": name,
        "source": actions.source(name).as_json(),
        **flags,
        "irreversible": action.irreversible,
        "compensation": action.compensation,
        "args_schema": catalog.args_schema(action),
    }


def _arguments(schema: dict) -> str:
    properties = schema.get("properties", {})
    if not properties:
        return "any JSON object" if schema.get("additionalProperties", True) is not False else "none"
    required = set(schema.get("required", []))
    return "; ".join(
        f"{field} ({spec.get('type', 'see schema')}{', required' if field in required else ''})"
        for field, spec in properties.items()
    )


class Command(BaseCommand):
    help = (
        "List every installed action: where it comes from (package and version, or module), its flags, "
        "compensation and argument schema; and the plugins left out (ACTION_PLUGINS_STRICT=0), with why."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="One JSON document, with the full argument schemas."
        )

    def handle(self, *args, as_json=False, **options):
        described = [describe(name) for name in actions.names()]
        problems = registry.problems()
        if as_json:
            body = {"actions": described, "problems": [problem.as_json() for problem in problems]}
            self.stdout.write(json.dumps(body, indent=2, sort_keys=True))
            return
        for action in described:
            source = actions.source(action["name"])
            flags = " ".join(flag for flag in FLAGS if action[flag]) or "none"
            self.stdout.write(action["name"])
            self.stdout.write(f"  source:       {source.label}{' (built-in)' if source.builtin else ''}")
            self.stdout.write(f"  flags:        {flags}")
            self.stdout.write(f"  compensation: {action['compensation'] or 'none (irreversible)'}")
            self.stdout.write(f"  arguments:    {_arguments(action['args_schema'])}")
        if problems:
            self.stdout.write(f"\nLeft out ({len(problems)}):")
            for problem in problems:
                self.stdout.write(f"  - {problem}")
