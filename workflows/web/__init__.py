"""The web interfaces, thin layers over `workflows.operations`: the
console's function-based views and their URLs (`urls`, `views*`), the JSON
API (`api`, django-ninja), and what they share: cursor pagination, strict
JSON parsing, the request middleware and the throttled login backend.

A view checks the role, calls one operation and renders or redirects; it
never moves a status itself. Nothing outside web imports it.
"""
