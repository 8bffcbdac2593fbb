"""The console, a thin layer over `workflows.operations`: its
function-based views, one module per resource (`views`), and their URLs
(`urls`); sign-in, waiting for a workflow, and what the console and the
JSON API (`workflows.api`) share: cursor pagination, strict JSON parsing,
the request middleware and the throttled login backend.

A view checks the role, calls one operation and renders or redirects; it
never moves a status itself. Only the JSON API (its own layer) and what
wires the project (apps, URLs, the ASGI entry point) import it.
"""
