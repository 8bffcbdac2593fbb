"""Actions are discovered: the built-ins and installed packages by their
entry points, others from ACTION_MODULES; every process finds the same ones,
and `manage.py actions` lists them with where each came from."""

import json
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from tests.support.processes import manage
from tests.support.running import wait_for_status
from workflows import actions
from workflows.models import Step

BUILTINS = {
    "ticket.create": "tickets",
    "ticket.comment": "tickets",
    "ticket.close": "tickets",
    "http.post": "webhooks",
    "email.send": "mail",
    "noop": "noop",
}
GREETING = "tests.support.plugin_modules.greeting"


def listed(*args, **env) -> dict:
    done = manage("actions", "--json", *args, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_builtins_are_installed_from_this_project_s_entry_points():
    for name, entry_point in BUILTINS.items():
        source = actions.source(name)
        assert (source.via, source.name, source.distribution) == ("entry point", entry_point, "durable-console")
        assert source.value == f"workflows.actions.{entry_point}"
        assert source.builtin


def test_manage_py_actions_lists_each_action_with_source_flags_compensation_and_schema():
    body = listed()
    by_name = {action["name"]: action for action in body["actions"]}
    assert set(BUILTINS) <= set(by_name)
    assert body["problems"] == []
    create = by_name["ticket.create"]
    assert create["source"] == {
        "via": "entry point",
        "name": "tickets",
        "value": "workflows.actions.tickets",
        "distribution": "durable-console",
        "version": "0.1.0",
        "builtin": True,
    }
    assert (create["idempotent"], create["can_lookup"], create["destructive"], create["in_process"]) == (
        True,
        True,
        False,
        False,
    )
    assert (create["compensation"], create["irreversible"]) == ("ticket.close", False)
    # Its preview carries the request it sends: no approval before it exists.
    assert (create["preview_binding"], create["preview_required"]) == (False, True)
    assert create["args_schema"]["type"] == "object"
    assert (by_name["email.send"]["compensation"], by_name["email.send"]["irreversible"]) == (None, True)

    text = manage("actions").stdout
    block = text[text.index("ticket.create\n") :].split("\n\n")[0]
    assert "entry point 'tickets' (workflows.actions.tickets) of durable-console 0.1.0 (built-in)" in block
    assert "flags:        idempotent can_lookup preview_required\n" in block
    assert "compensation: ticket.close" in block


def test_action_modules_installs_a_module_s_actions_with_their_schema():
    body = listed(ACTION_MODULES=GREETING)
    greeting = next(action for action in body["actions"] if action["name"] == "greeting.say")
    assert greeting["source"] == {
        "via": "ACTION_MODULES",
        "name": GREETING,
        "value": GREETING,
        "distribution": None,
        "version": None,
        "builtin": False,
    }
    assert greeting["args_schema"]["required"] == ["name"]
    assert greeting["args_schema"]["additionalProperties"] is False
    assert greeting["irreversible"] is True
    assert "greeting.say" not in {action["name"] for action in listed()["actions"]}


@pytest.mark.live
def test_an_action_modules_action_runs_on_a_real_worker(api, start_worker, rediscover, settings):
    settings.ACTION_MODULES = [GREETING]
    rediscover()
    start_worker(ACTION_MODULES=GREETING)
    plan = {
        "name": "greet",
        "submission_key": "greet-1",
        "steps": [{"key": "hello", "action": "greeting.say", "args": {"name": "Ada"}}],
    }
    submitted = api["agent"].post("/workflows", plan)
    assert submitted.status_code == 201, submitted.content
    workflow_id = submitted.json()["id"]
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "fine"}).status_code == 200
    wait_for_status(workflow_id, "COMPLETE")
    assert Step.objects.get(workflow_id=workflow_id).result == {"greeting": "Hello, Ada"}


def test_without_the_module_configured_a_plan_naming_its_action_is_refused(api):
    plan = {
        "name": "greet",
        "submission_key": "greet-2",
        "steps": [{"key": "hello", "action": "greeting.say", "args": {"name": "Ada"}}],
    }
    refused = api["agent"].post("/workflows", plan)
    assert refused.status_code == 400
    assert "steps.0.action" in refused.json()["error"]["fields"]


def _copy_of_the_project(tmp_path: Path) -> Path:
    """This checkout's code, as a fresh clone has it: no virtualenv, no
    installed metadata beside it."""
    copy = tmp_path / "checkout"
    shutil.copytree(
        django_settings.BASE_DIR,
        copy,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "var", "*.egg-info", "__pycache__", "tests", "staticfiles", "test-artifacts", ".*cache"
        ),
    )
    return copy


def test_a_checkout_whose_package_is_not_installed_refuses_to_start_saying_how_to_install_it(tmp_path):
    copy = _copy_of_the_project(tmp_path)
    # The virtualenv's packages without this project's installed metadata:
    # what a fresh clone has when only the dependencies were installed.
    packages = Path(sysconfig.get_paths()["purelib"])
    bare = tmp_path / "site-packages"
    bare.mkdir()
    for entry in packages.iterdir():
        if "durable_console" not in entry.name:
            (bare / entry.name).symlink_to(entry)
    done = manage("check", cwd=copy, python=(sys.executable, "-S"), PYTHONPATH=str(bare))
    assert done.returncode != 0
    assert "ImproperlyConfigured: durable-console is not installed in this Python environment" in done.stderr
    assert "run `make setup`" in done.stderr
    assert "entry points of the group 'durableconsole.actions'" in done.stderr


def test_installed_metadata_older_than_pyproject_refuses_to_start(tmp_path):
    copy = _copy_of_the_project(tmp_path)
    pyproject = copy / "pyproject.toml"
    declared = '[project.entry-points."durableconsole.actions"]\n'
    pyproject.write_text(pyproject.read_text().replace(declared, f'{declared}pager = "workflows.actions.pager"\n'))
    done = manage("check", cwd=copy)
    assert done.returncode != 0
    assert "ImproperlyConfigured: The installed metadata of durable-console" in done.stderr
    assert "is out of date" in done.stderr and "'pager': 'workflows.actions.pager'" in done.stderr
    assert "Run `make setup`" in done.stderr
