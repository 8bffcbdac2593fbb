"""A bad plugin stops start-up naming itself and its problem, or, with
ACTION_PLUGINS_STRICT=0, is left out (whole) while the others load, and is
shown to operators, never on the public /healthz."""

import json

import pytest

from tests.support import plugin_packages
from tests.support.personas import PASSWORD
from tests.support.processes import manage
from tests.support.seeing import Client
from workflows import actions

M = "tests.support.plugin_modules"
# (ACTION_MODULES entry, what the message must say)
BAD = [
    (f"{M}.no_such_module", f"cannot be imported: ModuleNotFoundError: No module named '{M}.no_such_module'"),
    (f"{M}.crashes", "cannot be imported: RuntimeError: the refunds API token is not configured <see REFUNDS_TOKEN>"),
    (f"{M}.empty", "declares no action: decorate its Action classes with @register"),
    (
        f"{M}.takes_builtin",
        "action 'ticket.create' is already provided by entry point 'tickets' "
        "(workflows.actions.tickets) of durable-console",
    ),
    (f"{M}.twice", "declares the action 'twice.same' twice"),
    (f"{M}.half_bad", "Broken does not implement perform(args, operation_key) (so none of its 2 actions is installed)"),
    (f"{M}.bad:NoName", "NoName has no `name`"),
    (f"{M}.bad:NoPerform", "NoPerform does not implement perform(args, operation_key)"),
    (f"{M}.bad:FlagNotBool", "FlagNotBool.idempotent must be True or False; got 'no'"),
    (f"{M}.bad:ArgsNotModel", "ArgsNotModel.Args must be a pydantic model (a BaseModel subclass); got <class 'dict'>"),
    (f"{M}.bad:LookupMissing", "LookupMissing sets can_lookup but does not implement lookup(operation_key)"),
    (
        f"{M}.bad:CompensationMissing",
        "CompensationMissing.compensation names 'bad.undo_that_nobody_wrote', which is not installed",
    ),
    (
        f"{M}.bad:BindingWithoutPreview",
        "BindingWithoutPreview sets preview_binding but does not implement preview(args)",
    ),
    (f"{M}.bad:NotAnAction", f"<class '{M}.bad.NotAnAction'> is not a subclass of workflows.actions.Action"),
]
# Sound on its own, but compensated by an action of half_bad.
UNDONE_BY_HALF = (f"{M}.undone_by_half", "Undone.compensation names 'half.sound', which is not installed")
GREETING = f"{M}.greeting"


@pytest.mark.parametrize(("module", "message"), BAD, ids=[module.rpartition(".")[2] for module, _ in BAD])
def test_strict_start_up_refuses_a_bad_plugin_naming_it_and_its_problem(module, message):
    done = manage("check", ACTION_MODULES=f"{GREETING},{module}")
    assert done.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured: Action plugins failed to load" in done.stderr
    assert f"  - action plugin ACTION_MODULES {module}: {message}" in done.stderr
    assert "greeting" not in done.stderr.split("ImproperlyConfigured:")[-1]  # the sound plugin is not blamed


def test_a_plugin_compensated_by_a_left_out_plugin_is_left_out_too():
    done = manage("check", ACTION_MODULES=f"{M}.half_bad,{UNDONE_BY_HALF[0]}")
    assert done.returncode != 0
    assert f"  - action plugin ACTION_MODULES {UNDONE_BY_HALF[0]}: {UNDONE_BY_HALF[1]}" in done.stderr
    assert manage("check", ACTION_MODULES=UNDONE_BY_HALF[0]).returncode != 0
    assert manage("check", ACTION_MODULES=f"{M}.greeting").returncode == 0


def test_without_strict_the_bad_plugins_are_left_out_and_the_others_load():
    modules = [GREETING, *(module for module, _ in BAD), UNDONE_BY_HALF[0]]
    env = {"ACTION_MODULES": ",".join(modules), "ACTION_PLUGINS_STRICT": "0"}
    done = manage("actions", "--json", **env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    by_name = {action["name"]: action for action in body["actions"]}
    assert {"greeting.say", "ticket.create", "noop"} <= set(by_name)
    assert by_name["ticket.create"]["source"]["distribution"] == "durable-console"
    assert not {"half.sound", "half.broken", "undone.by_half", "twice.same"} & set(by_name)
    problems = [(p["plugin"]["value"], p["problem"]) for p in body["problems"]]
    assert len(problems) == len(BAD) + 1
    for module, message in [*BAD, UNDONE_BY_HALF]:
        assert any(value == module and message in problem for value, problem in problems), module

    checked = manage("check", **env)
    assert checked.returncode == 0
    assert f"(workflows.W001) action plugin ACTION_MODULES {M}.crashes: cannot be imported" in checked.stderr


@pytest.fixture
def left_out(rediscover, settings):
    settings.ACTION_MODULES = [GREETING, f"{M}.crashes", f"{M}.bad:FlagNotBool"]
    settings.ACTION_PLUGINS_STRICT = False
    return rediscover()


def test_the_operators_page_shows_the_plugins_left_out(people, left_out):
    assert actions.find("greeting.say") is not None and actions.find("bad.flag_not_bool") is None
    client = Client()
    client.login(username="operator", password=PASSWORD)
    page = client.get("/attention/").content.decode()
    assert "Action plugins left out" in page
    assert page.count('data-testid="plugin-problem"') == 2
    assert f"<td>{M}.crashes</td>" in page and f"<td>{M}.bad:FlagNotBool</td>" in page
    # Plugin text is escaped like any other.
    assert "not configured &lt;see REFUNDS_TOKEN&gt;" in page
    assert "FlagNotBool.idempotent must be True or False; got &#x27;no&#x27;" in page
    partial = client.get("/attention/", HTTP_HX_REQUEST="true").content.decode()
    assert partial.count('data-testid="plugin-problem"') == 2


def test_only_operators_see_the_plugins_left_out(people, left_out):
    for persona in ("reviewer", "auditor", "agent"):
        client = Client()
        client.login(username=persona, password=PASSWORD)
        assert client.get("/attention/").status_code == 403
        assert "Action plugins left out" not in client.get("/dashboard/").content.decode()


def test_healthz_says_nothing_of_the_plugins_left_out(db, left_out):
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_page_shows_nothing_when_every_plugin_loaded(people):
    client = Client()
    client.login(username="operator", password=PASSWORD)
    assert "Action plugins left out" not in client.get("/attention/").content.decode()


def test_a_bad_class_declared_after_start_up_is_refused_and_not_installed():
    with pytest.raises(TypeError, match="Late does not implement perform"):

        @actions.register
        class Late(actions.Action):
            name = "late.no_perform"

    assert actions.find("late.no_perform") is None


@pytest.fixture(scope="module")
def mixed_distribution(tmp_path_factory):
    """durableconsole-mixed, installed into a directory of its own that only
    the processes of these tests have on their path: installed into the
    virtualenv, its bad entry points would stop every other process of the
    test run at start-up."""
    workdir = tmp_path_factory.mktemp("mixed")
    target = workdir / "site"
    plugin_packages.install("durableconsole-mixed", workdir, target=target)
    return str(target)


def test_strict_start_up_names_the_bad_entry_points_and_their_distribution(mixed_distribution):
    done = manage("check", PYTHONPATH=mixed_distribution)
    assert done.returncode != 0
    message = done.stderr.split("ImproperlyConfigured:")[-1]
    assert (
        "  - action plugin entry point 'faulty' (durableconsole_mixed.faulty) of durableconsole-mixed 0.3.1: "
        "cannot be imported: KeyError: 'MIXED_API_TOKEN_NEVER_SET'"
    ) in message
    assert (
        "  - action plugin entry point 'clash' (durableconsole_mixed.clash:TicketCreateAgain) of "
        "durableconsole-mixed 0.3.1: action 'ticket.create' is already provided by entry point 'tickets'"
    ) in message
    assert "'sound'" not in message


def test_without_strict_a_distribution_s_sound_entry_point_loads_beside_its_bad_ones(mixed_distribution):
    done = manage("actions", "--json", PYTHONPATH=mixed_distribution, ACTION_PLUGINS_STRICT="0")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    by_name = {action["name"]: action for action in body["actions"]}
    assert by_name["mixed.sound"]["source"] == {
        "via": "entry point",
        "name": "sound",
        "value": "durableconsole_mixed.sound",
        "distribution": "durableconsole-mixed",
        "version": "0.3.1",
        "builtin": False,
    }
    assert by_name["ticket.create"]["source"]["distribution"] == "durable-console"
    assert sorted(p["plugin"]["name"] for p in body["problems"]) == ["clash", "faulty"]
    assert all(p["plugin"]["distribution"] == "durableconsole-mixed" for p in body["problems"])


def test_a_class_declared_after_start_up_may_not_take_an_installed_name():
    with pytest.raises(TypeError, match="action 'ticket.create' is already provided by entry point 'tickets'"):

        @actions.register
        class AnotherTicketCreate(actions.Action):
            name = "ticket.create"

            def perform(self, args, operation_key):
                return actions.Outcome(result={})

    assert type(actions.get("ticket.create")).__module__ == "workflows.actions.tickets"
