"""The ASGI front of a web process (`durableconsole.asgi`, how production
serves): Django runs exactly as under WSGI, on a fixed pool of
`WEB_THREADS` threads (a2wsgi), which share the process's pool of
database connections (docs/deploying.md#database-connections); only the
waiters of `GET /api/v1/workflows/{id}/wait` are held here, as
coroutines, so that a waiter costs neither a thread nor a connection while
it waits.

A wait goes through Django (middleware, token, visibility, the view) on a
pool thread, which it gives back at once: if the workflow has not reached
the point asked for, the view parks the request (`waiting.Parking`) and
its placeholder answer is dropped. The front then waits on the process's
watcher, registered before the first pass so that no change slips by, and
passes the request through Django again after a change or at the
deadline; that pass answers.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from django.urls import Resolver404, resolve

from workflows.web import waiting

WAIT_VIEW = "api:workflow_wait"


def waiting_for(scope: dict) -> UUID | None:
    """The workflow a request waits for, when it is a wait."""
    if scope["type"] != "http" or not scope["path"].endswith("/wait"):
        return None
    try:
        match = resolve(scope["path"].removeprefix(scope.get("root_path", "")))
    except Resolver404:
        return None
    if match.view_name != WAIT_VIEW:
        return None
    try:
        return UUID(str(match.kwargs["workflow_id"]))
    except ValueError:
        return None


class Reply:
    """An answer held back until it is known not to be a parked placeholder."""

    def __init__(self):
        self.messages: list[dict] = []

    async def send(self, message: dict) -> None:
        self.messages.append(message)

    async def deliver(self, send) -> None:
        for message in self.messages:
            await send(message)


async def _no_body() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class Front:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif (workflow_id := waiting_for(scope)) is not None:
            await self._wait(workflow_id, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _wait(self, workflow_id: UUID, scope, receive, send) -> None:
        parking = waiting.Parking()
        scope = {**scope, waiting.PARKING: parking}
        left = None
        try:
            with waiting.watcher.watch(workflow_id) as watch:
                body = receive
                while True:
                    reply = Reply()
                    await self.app(scope, body, reply.send)
                    if not parking.parked:
                        await reply.deliver(send)
                        return
                    parking.parked = False
                    # The first pass had the request's body; from here on the
                    # client's side of the connection only says when it leaves.
                    body = _no_body
                    left = left or asyncio.ensure_future(_disconnected(receive))
                    if not await watch.wait_async(parking.until, parking.deadline, left):
                        return
        finally:
            if left is not None:
                left.cancel()

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # After gunicorn's graceful wait for open requests: the watcher's connection goes too.
                await asyncio.to_thread(waiting.watcher.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return
