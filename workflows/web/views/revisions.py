"""Revising a plan: the form over the arguments of its steps, and its POST,
which makes the next revision (`operations.revisions`)."""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from workflows import persons, roles
from workflows.errors import DomainError
from workflows.operations import revisions
from workflows.web import editing, seen
from workflows.web.auth import needs_recent_sign_in
from workflows.web.views.detail import detail_url, get_workflow_for_user


@login_required
@require_http_methods(["GET", "POST"])
@needs_recent_sign_in(back="workflow_revise")
def revise(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    """Edit the arguments of a plan's steps: the form, and its POST, which
    makes the next revision (`operations.revisions`)."""
    workflow = get_workflow_for_user(request, workflow_id)
    if not roles.is_reviewer(request.user) or persons.same(request.user, workflow.submitted_by_id):
        raise PermissionDenied
    steps = revisions.editable_steps(workflow)
    forms = [{"step": step, "inputs": editing.inputs(step.key, step.action, step.args)} for step in steps]
    problem, status = "", 200
    if request.method == "POST":
        edits, ok = [], True
        for form in forms:
            args, parsed = editing.parse(form["inputs"], request.POST)
            ok = ok and parsed
            if args != form["step"].args:
                edits.append((form, args))
        comment = request.POST.get("comment", "")[:4000]
        if not ok:
            problem, status = "Some fields need fixing: nothing was saved.", 400
        elif not edits:
            problem, status = "Nothing changed: edit an argument first.", 400
        else:
            try:
                revised = revisions.revise(
                    workflow,
                    by=request.user,
                    comment=comment,
                    revision=seen.from_form(request).revision,
                    steps=[{"key": form["step"].key, "args": args} for form, args in edits],
                )
            except DomainError as exc:
                problem, status = exc.message, 400 if exc.status == 400 else exc.status
                _place_errors(exc.fields or {}, [form for form, _ in edits])
            else:
                messages.success(
                    request,
                    f"Saved revision {revised.revision}. As its co-author you cannot "
                    "approve it: another reviewer does.",
                )
                return redirect(detail_url(workflow))
    # A form sent back with an error keeps the revision it was made from:
    # resending it must not edit a revision its editor never saw.
    edited = seen.from_form(request).revision if request.method == "POST" else workflow.revision
    return render(
        request,
        "workflows/revise.html",
        {
            "workflow": workflow,
            "forms": forms,
            "problem": problem,
            "edited_revision": edited,
            "comment": request.POST.get("comment", "") if request.method == "POST" else "",
        },
        status=status,
    )


def _place_errors(fields: dict[str, str], edited: list[dict]) -> None:
    """Put `steps.<i>.args.<argument>…` errors on the inputs of the edited step i."""
    for path, message in fields.items():
        parts = path.split(".")
        if len(parts) >= 4 and parts[0] == "steps" and parts[1].isdigit() and parts[2] == "args":
            index = int(parts[1])
            if index < len(edited):
                for item in edited[index]["inputs"]:
                    if item.argument == parts[3] and not item.error:
                        item.error = message if len(parts) == 4 else f"{'.'.join(parts[4:])}: {message}"
