"""The MCP server (`python -m durableconsole.mcp`) as an agent meets it:
spawned over stdio by the SDK's own client, pointed at a live server with
an agent's token; and its HTTP transport, which guards the port with its
own bearer token and an Origin check.
"""

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager

import anyio
import pytest
import requests
from django.conf import settings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows.models import DeadLetter, Workflow
from workflows.operations import plans, tokens
from workflows.ops.processes import free_port
from workflows.web import waiting

SERVER = [sys.executable, "-m", "durableconsole.mcp"]
NOOP = [{"key": "s", "action": "noop", "args": {}}]


@pytest.fixture(autouse=True)
def watcher_stopped():
    """The live server's watcher runs in this process: its connection goes with each test."""
    yield
    waiting.watcher.stop()


@pytest.fixture
def agent_mcp(live_server, people):
    """Runs `script(session)` against the MCP server spawned over stdio for the agent."""
    token = tokens.issue(people["agent"])

    def run(script, **env):
        @asynccontextmanager
        async def session():
            params = StdioServerParameters(
                command=SERVER[0],
                args=SERVER[1:],
                cwd=settings.BASE_DIR,
                env={"DURABLE_CONSOLE_URL": live_server.url, "DURABLE_CONSOLE_TOKEN": token, **env},
            )
            with open(os.devnull, "w") as quiet:
                async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as opened:
                    await opened.initialize()
                    yield opened

        async def main():
            async with session() as opened:
                return await script(opened)

        return anyio.run(main)

    run.token = token
    return run


def structured(result) -> dict:
    (text,) = result.content
    assert json.loads(text.text) == result.structured_content
    return result.structured_content


def test_the_mcp_server_imports_without_django_or_settings():
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    script = (
        "import sys, durableconsole.mcp; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'workflows', 'ninja'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_mcp_server_refuses_to_start_without_its_console_url_or_token():
    env = {
        key: value for key, value in os.environ.items() if key not in ("DURABLE_CONSOLE_URL", "DURABLE_CONSOLE_TOKEN")
    }
    no_url = subprocess.run(SERVER, env=env, capture_output=True, text=True, timeout=60)
    no_token = subprocess.run(
        SERVER, env={**env, "DURABLE_CONSOLE_URL": "http://127.0.0.1:1"}, capture_output=True, text=True, timeout=60
    )

    assert no_url.returncode == 2 and "DURABLE_CONSOLE_URL" in no_url.stderr
    assert no_token.returncode == 2 and "DURABLE_CONSOLE_TOKEN" in no_token.stderr


@pytest.mark.django_db(transaction=True)
def test_tools_are_listed_and_tell_a_model_nothing_runs_until_a_person_approves(agent_mcp):
    async def script(session):
        return (await session.list_tools()).tools

    tools = {tool.name: tool for tool in agent_mcp(script)}

    assert set(tools) == {"list_actions", "propose_plan", "get_plan", "wait_for_decision", "list_dead_letters"}
    assert "until a reviewer approves" in tools["propose_plan"].description
    assert "approves" in tools["wait_for_decision"].description
    assert tools["propose_plan"].input_schema["required"] == ["name", "steps", "submission_key"]
    waiting_for = tools["wait_for_decision"]
    assert "call again with the same plan id until decision is not null" in waiting_for.description
    assert "within 50 seconds at most" in waiting_for.description
    timeout = waiting_for.input_schema["properties"]["timeout_seconds"]
    assert timeout["default"] == 50 and "maximum" not in timeout and "clamped to 50" in timeout["description"]


@pytest.mark.django_db(transaction=True)
def test_wait_for_decision_clamps_a_long_request_to_its_cap_and_answers_null_with_the_plan_to_ask_again(
    agent_mcp, http_api
):
    async def script(session):
        proposed = structured(
            await session.call_tool("propose_plan", {"name": "slow person", "steps": NOOP, "submission_key": "w-1"})
        )
        asked = {"plan_id": proposed["id"], "timeout_seconds": 600}
        undecided = structured(await session.call_tool("wait_for_decision", asked))
        approve = http_api["reviewer"].post
        approving = await anyio.to_thread.run_sync(approve, f"/workflows/{proposed['id']}/approve", {"comment": "go"})
        decided_by = approving.status_code
        decided = structured(await session.call_tool("wait_for_decision", asked))
        return proposed, undecided, decided_by, decided

    proposed, undecided, decided_by, decided = agent_mcp(script, MCP_WAIT_SECONDS="1")

    assert undecided["decision"] is None and undecided["status"] == "PLANNED"
    assert undecided["timeout_seconds"] == 1  # 600 asked, clamped to the cap
    assert undecided["id"] == proposed["id"] and proposed["id"] in undecided["next"]
    assert decided_by == 200
    assert decided["decision"] == "approved" and "next" not in decided and decided["timeout_seconds"] == 1


def test_the_mcp_server_refuses_a_wait_cap_above_50_seconds():
    env = {**os.environ, "DURABLE_CONSOLE_URL": "http://127.0.0.1:1", "DURABLE_CONSOLE_TOKEN": "dc_x"}
    refused = subprocess.run(SERVER, env={**env, "MCP_WAIT_SECONDS": "600"}, capture_output=True, text=True, timeout=60)

    assert refused.returncode == 2 and "MCP_WAIT_SECONDS" in refused.stderr


@pytest.mark.django_db(transaction=True)
def test_list_actions_gives_each_action_with_its_args_schema(agent_mcp):
    async def script(session):
        return structured(await session.call_tool("list_actions", {}))

    actions = {action["name"]: action for action in agent_mcp(script)["actions"]}

    create = actions["ticket.create"]
    assert create["args_schema"]["type"] == "object" and "title" in create["args_schema"]["properties"]
    assert {"idempotent", "destructive", "irreversible", "compensation"} <= set(create)


@pytest.mark.django_db(transaction=True)
def test_an_invalid_plan_answers_with_field_errors_a_model_can_fix_and_stores_nothing(agent_mcp):
    steps = [
        {"key": "open", "action": "ticket.create", "args": {"body": "no title"}},
        {"key": "mail", "action": "no.such.action", "args": {}},
    ]

    async def script(session):
        return await session.call_tool("propose_plan", {"name": "bad", "steps": steps, "submission_key": "bad-1"})

    result = agent_mcp(script)

    answer = structured(result)
    assert result.is_error and answer["proposed"] is False
    paths = {error["path"] for error in answer["errors"]}
    assert "steps.0.args.title" in paths and any(path.startswith("steps.1") for path in paths)
    assert all(set(error) == {"path", "message"} and error["message"] for error in answer["errors"])
    assert not Workflow.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_refusal_from_the_console_is_a_tool_error_that_never_shows_the_token(agent_mcp):
    async def script(session):
        return await session.call_tool("get_plan", {"plan_id": "00000000-0000-0000-0000-000000000000"})

    result = agent_mcp(script)

    assert result.is_error and "404" in result.content[0].text
    assert agent_mcp.token not in result.content[0].text


def dead_letter(user, reviewer, key) -> DeadLetter:
    """A comment on a ticket the desk does not have: it fails for good."""
    steps = [
        {"key": "find", "action": "noop", "args": {"ticket": 777777}},
        {
            "key": "note",
            "action": "ticket.comment",
            "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "hi"},
        },
    ]
    workflow = plans.submit(user, {"name": "comment", "submission_key": key, "steps": steps}).workflow
    decide.approve(workflow, by=reviewer)
    run_until(workflow.pk, "FAILED")
    return DeadLetter.objects.get(workflow=workflow)


@pytest.mark.django_db(transaction=True)
def test_list_dead_letters_shows_the_agent_its_own_only(agent_mcp, people, desk, django_user_model):
    mine = dead_letter(people["agent"], people["reviewer"], "mine")
    theirs = dead_letter(django_user_model.objects.create_user("other-agent"), people["reviewer"], "theirs")

    async def script(session):
        every = structured(await session.call_tool("list_dead_letters", {}))
        of_theirs = structured(await session.call_tool("list_dead_letters", {"plan_id": str(theirs.workflow_id)}))
        return every, of_theirs

    every, of_theirs = agent_mcp(script)

    assert [entry["id"] for entry in every["dead_letters"]] == [str(mine.pk)]
    assert every["dead_letters"][0]["step_key"] == "note" and of_theirs["dead_letters"] == []


@pytest.mark.live
def test_a_plan_proposed_over_mcp_runs_on_the_desk_after_a_reviewer_approves(
    agent_mcp, http_api, start_worker, desk, live_server
):
    start_worker()
    plan = ticket_plan("mcp-1")
    approvals = []

    def approve_soon(plan_id):
        time.sleep(1.0)
        approvals.append(http_api["reviewer"].post(f"/workflows/{plan_id}/approve", {"comment": "go"}).status_code)

    async def script(session):
        proposed = structured(
            await session.call_tool(
                "propose_plan",
                {"name": plan["name"], "steps": plan["steps"], "submission_key": "mcp-1", "context": {"why": "test"}},
            )
        )
        still_planned = structured(await session.call_tool("get_plan", {"plan_id": proposed["id"]}))
        untouched = desk.tickets()
        deciding = threading.Thread(target=approve_soon, args=(proposed["id"],))
        deciding.start()
        decided = structured(
            await session.call_tool("wait_for_decision", {"plan_id": proposed["id"], "timeout_seconds": 30})
        )
        await anyio.to_thread.run_sync(deciding.join)
        return proposed, still_planned, untouched, decided

    proposed, still_planned, untouched, decided = agent_mcp(script)

    assert proposed["proposed"] is True and proposed["status"] == "PLANNED"
    assert proposed["review_url"] == f"{live_server.url}/workflows/{proposed['id']}/"
    assert still_planned["status"] == "PLANNED" and untouched == []
    assert approvals == [200]
    assert decided["decision"] == "approved" and decided["status"] in ("APPROVED", "RUNNING", "COMPLETE")
    deadline = time.monotonic() + 60
    while Workflow.objects.get(pk=proposed["id"]).status != "COMPLETE":
        assert time.monotonic() < deadline, "the approved plan did not complete"
        time.sleep(0.2)
    (ticket,) = desk.tickets()
    assert ticket["title"] == "Printer on fire" and ticket["status"] == "closed"


def test_http_mode_refuses_to_start_without_its_token_then_guards_the_port_by_token_and_origin(tmp_path):
    port = free_port()
    env = {**os.environ, "DURABLE_CONSOLE_URL": "http://127.0.0.1:1", "DURABLE_CONSOLE_TOKEN": "dc_agent-token"}
    env.pop("MCP_HTTP_TOKEN", None)
    refused = subprocess.run([*SERVER, "--http", str(port)], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "MCP_HTTP_TOKEN" in refused.stderr

    secret = "an-mcp-http-token-for-the-test"
    log = (tmp_path / "mcp.log").open("w")
    server = subprocess.Popen(
        [*SERVER, "--http", str(port)], env={**env, "MCP_HTTP_TOKEN": secret}, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}/mcp"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}

    def post(**headers):
        return requests.post(url, json=initialize, headers={**accept, **headers}, timeout=10, stream=True)

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                no_token = post()
                break
            except requests.ConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "mcp.log").read_text()
                time.sleep(0.1)
        wrong_token = post(Authorization="Bearer not-the-token")
        foreign = post(Authorization=f"Bearer {secret}", Origin="https://evil.example")
        foreign_without_token = post(Origin="http://localhost.evil.example")
        local = post(Authorization=f"Bearer {secret}", Origin=f"http://localhost:{port}")
        agent = post(Authorization=f"Bearer {secret}")

        assert no_token.status_code == 401 and no_token.headers["WWW-Authenticate"] == "Bearer"
        assert wrong_token.status_code == 401
        assert foreign.status_code == 403 and foreign_without_token.status_code == 403
        assert local.status_code == 200 and agent.status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
