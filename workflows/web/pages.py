"""What the console's pages share: one page of a list, and the answer to an
operation posted from a form."""

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render

from workflows import roles
from workflows.errors import DomainError, StaleRevision
from workflows.web.pagination import page_by_created


def reads(request: HttpRequest, kind: str) -> None:
    """403 for a role that reads none of this kind (`roles.may_read`), as the
    API's `lookup.reads`: before any lookup, on lists and details alike."""
    if not roles.may_read(request.user, kind):
        raise PermissionDenied("Your role does not read these.")


def list_page(request: HttpRequest, items, template: str, *, rows: str, page_size: int, context: dict) -> HttpResponse:
    """One page of `items`, newest first, from the request's cursor (a forged
    one is a 400): the whole page, or only its rows to htmx. A history
    restore after hx-push-url needs the whole page, not the rows."""
    try:
        found, next_cursor = page_by_created(items, request.GET.get("cursor") or None, page_size)
    except DomainError as exc:
        return HttpResponseBadRequest(exc.message)
    partial = request.htmx and not request.htmx.history_restore_request
    return render(
        request, f"{template}#rows" if partial else template, {rows: found, "next_cursor": next_cursor, **context}
    )


def act(
    request: HttpRequest,
    operation: Callable[[], object],
    *,
    done: str | Callable[[object], str],
    back: str,
    partial: Callable[[], HttpResponse],
    stale: Callable[[StaleRevision], HttpResponse] | None = None,
) -> HttpResponse:
    """Run one operation posted from a console form and report it as a
    message. A plain post is redirected to `back` (POST/redirect/GET); htmx
    gets `partial()`, rendered after the change. A refusal is a message,
    not an error status, because htmx swaps only 2xx answers; a decision on
    what is no longer current goes to `stale`, when given. `done` may be
    worded from what the operation returned."""
    try:
        result = operation()
    except StaleRevision as exc:
        messages.warning(request, exc.message)
        if stale is not None:
            return stale(exc)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done(result) if callable(done) else done)
    if not request.htmx:
        return redirect(back)
    return partial()
