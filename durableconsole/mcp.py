"""An MCP server for LLM agents: propose plans to Durable Console and learn
what a person decided.

    DURABLE_CONSOLE_URL=https://console.example.com DURABLE_CONSOLE_TOKEN=dc_... \\
        python -m durableconsole.mcp                 # stdio, for a desktop or CLI agent
    MCP_HTTP_TOKEN=... python -m durableconsole.mcp --http 8765   # streamable HTTP on 127.0.0.1

It speaks to the console through `durableconsole.client` with the token it
is given, so an agent can do over MCP exactly what that token may do over
the API, and no more. Like the client it imports no Django.

Over HTTP anyone who can reach the port would act with the console token,
so the server listens on 127.0.0.1 only, asks for its own bearer token
(`MCP_HTTP_TOKEN`) and refuses a browser page from another origin (a page
on any site can post to localhost).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sys
from typing import Annotated, Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from durableconsole.client import Console, ConsoleError, Invalid

INSTRUCTIONS = """\
Durable Console runs actions with real effects (tickets, payments, mail) only
after a person approves them. You propose a plan; nothing happens until a
reviewer approves it in the console. Start with list_actions to learn the
actions and the schema of their args, then propose_plan. If it answers with
errors, fix each field it names and propose again. Once proposed, give the
person the review URL and call wait_for_decision; while you wait, do not
repeat the work another way. A rejected plan did nothing."""

HTTP_LOOPBACK = "127.0.0.1"
LOCAL_ORIGIN_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# How long one wait_for_decision call may hold: a person may take hours, but
# most MCP clients give up on a tool call after 60 s, so each call answers
# within this and the model calls again. A longer request is clamped, not
# refused: the model's intent ("wait") is still served, in slices.
# `MCP_WAIT_SECONDS` may lower it (tests do), never raise it.
MAX_WAIT_SECONDS = 50
MAX_DEAD_LETTERS = 200
WAIT_TIMEOUT_DESCRIPTION = (
    f"How long this call may wait, at most {MAX_WAIT_SECONDS}: a longer request is clamped to "
    f"{MAX_WAIT_SECONDS} (call again to wait longer)"
)
WAIT_DESCRIPTION = """\
Wait until a person approves or rejects the plan (or it expires or is
cancelled), and answer with the plan and its `decision`: approved, rejected,
expired, cancelled, or null when no one has decided yet. One call answers
within {cap} seconds at most (a longer timeout_seconds is clamped to {cap});
a person may take hours, so while `decision` is null, call again with the
same plan id until decision is not null. Only an approved plan runs, and it
runs in the console, not here. While the decision is null, nothing has
happened: do not do the work another way."""


def build(console: Console, *, max_wait: int = MAX_WAIT_SECONDS) -> MCPServer:
    """The server and its tools, speaking to `console`; one
    wait_for_decision call holds at most `max_wait` seconds."""
    if not 1 <= max_wait <= MAX_WAIT_SECONDS:
        raise ValueError(f"max_wait is 1 to {MAX_WAIT_SECONDS} seconds; got {max_wait!r}")
    server = MCPServer("durable-console", instructions=INSTRUCTIONS)

    def review_url(plan_id: str) -> str:
        return f"{console.url}/workflows/{plan_id}/"

    def plan(workflow: dict) -> dict:
        return {**workflow, "review_url": review_url(workflow["id"])}

    @server.tool()
    def list_actions() -> dict[str, Any]:
        """The actions a plan may use: each with its name, its flags
        (idempotent, destructive, irreversible, its compensation) and
        `args_schema`, the JSON Schema its args must match. Read this before
        propose_plan. Listing runs nothing."""
        return {"actions": _calling(console.actions)}

    @server.tool()
    def propose_plan(
        name: Annotated[str, Field(description="What the plan does, for the person who reviews it")],
        steps: Annotated[
            list[dict[str, Any]],
            Field(
                description=(
                    'The steps in order: {"key", "action", "args", "compensation"?: {"action", "args"}}. '
                    'An arg may be {"$from": "<earlier step key>.result.<field>"}; a secret is '
                    '{"$secret": "NAME"}, never its value.'
                )
            ),
        ],
        submission_key: Annotated[
            str,
            Field(
                min_length=1,
                description=(
                    "A key unique to this piece of work: proposing the same plan with the same key again "
                    "answers with the plan already proposed instead of a second one"
                ),
            ),
        ],
        context: Annotated[dict[str, Any] | None, Field(description="Why: anything that helps the reviewer")] = None,
        deadline_seconds: Annotated[
            int | None, Field(gt=0, description=("How long the plan may wait for approval and run"))
        ] = None,
    ) -> CallToolResult:
        """Propose a plan of actions for a person to review. NOTHING RUNS
        until a reviewer approves it in the console: this only submits it,
        and answers with its id and review URL (give the URL to the person).
        Then call wait_for_decision. If the plan is refused, the answer has
        `errors`, a list of {path, message} (a path such as
        `steps.0.args.title`): fix those fields and propose again."""
        try:
            workflow = console.submit(
                name, steps, submission_key=submission_key, context=context, deadline=deadline_seconds
            )
        except Invalid as refused:
            errors = [{"path": path, "message": message} for path, message in refused.errors.items()]
            return _result(
                {
                    "proposed": False,
                    "message": refused.message,
                    "errors": errors or [{"path": "", "message": refused.message}],
                },
                error=True,
            )
        except ConsoleError as exc:
            raise ToolError(str(exc)) from None
        return _result(
            {
                "proposed": True,
                "id": workflow["id"],
                "status": workflow["status"],
                "review_url": review_url(workflow["id"]),
                "next": "Nothing has run. Give the person the review URL, then call wait_for_decision.",
            }
        )

    @server.tool()
    def get_plan(plan_id: Annotated[str, Field(description="The id propose_plan answered with")]) -> dict[str, Any]:
        """A proposed plan as it stands: its status (PLANNED until a person
        decides), and each step's status, attempts and result."""
        return plan(_calling(console.get, plan_id))

    @server.tool(description=" ".join(WAIT_DESCRIPTION.format(cap=max_wait).split()))
    def wait_for_decision(
        plan_id: Annotated[str, Field(description="The id propose_plan answered with")],
        timeout_seconds: Annotated[
            int,
            Field(ge=1, description=WAIT_TIMEOUT_DESCRIPTION),
        ] = max_wait,
    ) -> dict[str, Any]:
        granted = min(timeout_seconds, max_wait)
        workflow = plan(_calling(console.wait, plan_id, until="decision", timeout=granted))
        answer = {**workflow, "timeout_seconds": granted}
        if workflow.get("decision") is None:
            answer["next"] = (
                "No decision yet and nothing has run. Call wait_for_decision again with the same plan_id "
                f"({plan_id}); do not do the work another way."
            )
        return answer

    @server.tool()
    def list_dead_letters(
        plan_id: Annotated[str | None, Field(description="Only those of this plan")] = None,
        status: Annotated[str | None, Field(description="OPEN, REPLAYED or DISCARDED")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_DEAD_LETTERS)] = 50,
    ) -> dict[str, Any]:
        """Steps of your plans that failed for good and wait for an
        operator (newest first). Only a person can replay or discard them;
        do not redo their effect another way."""
        return {"dead_letters": _calling(console.dead_letters, workflow=plan_id, status=status, limit=limit)}

    return server


def _calling(call, *args, **kwargs):
    """The console's answer, or its refusal as a tool error the model reads."""
    try:
        return call(*args, **kwargs)
    except ConsoleError as exc:
        raise ToolError(str(exc)) from None


def _result(data: dict, *, error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))], structured_content=data, is_error=error
    )


class Guard:
    """ASGI middleware in front of the HTTP transport: a request from a
    browser page on another origin gets 403, one without the bearer token
    401. Requests without `Origin` (agents, not browsers) pass."""

    def __init__(self, app, token: str):
        self.app, self._token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        headers = {name.lower(): value for name, value in scope.get("headers", ())}
        origin = headers.get(b"origin")
        if origin is not None and not _local_origin(origin.decode("latin-1")):
            return await _refuse(scope, send, 403, "this origin may not call the MCP server")
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
            return await _refuse(scope, send, 401, "a bearer token (MCP_HTTP_TOKEN) is required")
        await self.app(scope, receive, send)


def _local_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.hostname in LOCAL_ORIGIN_HOSTS
    except ValueError:
        return False


async def _refuse(scope, send, status: int, message: str) -> None:
    if scope["type"] != "http":
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"error": message}).encode()})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m durableconsole.mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve streamable HTTP on 127.0.0.1:PORT (needs MCP_HTTP_TOKEN) instead of stdio",
    )
    options = parser.parse_args(argv)
    url, token = os.environ.get("DURABLE_CONSOLE_URL", ""), os.environ.get("DURABLE_CONSOLE_TOKEN", "")
    if not url.startswith(("http://", "https://")):
        parser.error("set DURABLE_CONSOLE_URL to the console's address, e.g. https://console.example.com")
    if not token:
        parser.error("set DURABLE_CONSOLE_TOKEN to a token from `manage.py issue_token USERNAME`")
    http_token = os.environ.get("MCP_HTTP_TOKEN", "")
    if options.http is not None:
        if not 0 < options.http < 65536:
            parser.error(f"--http takes a port number; got {options.http}")
        if len(http_token) < 16:
            parser.error(
                "--http needs MCP_HTTP_TOKEN, a secret of at least 16 characters that clients send as "
                "`Authorization: Bearer <token>`"
            )

    max_wait = os.environ.get("MCP_WAIT_SECONDS", str(MAX_WAIT_SECONDS))
    if not max_wait.isdigit() or not 1 <= int(max_wait) <= MAX_WAIT_SECONDS:
        parser.error(f"MCP_WAIT_SECONDS is how long one wait_for_decision call holds, 1 to {MAX_WAIT_SECONDS}")

    with Console(url, token) as console:
        server = build(console, max_wait=int(max_wait))
        if options.http is None:
            server.run("stdio")
            return
        import uvicorn

        app = Guard(server.streamable_http_app(host=HTTP_LOOPBACK), http_token)
        uvicorn.run(app, host=HTTP_LOOPBACK, port=options.http, log_level="warning")


if __name__ == "__main__":
    sys.exit(main())
