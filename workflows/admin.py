from django.contrib import admin
from django.contrib.contenttypes.views import shortcut
from django.core.exceptions import ValidationError
from django.http import Http404

from workflows.models import ActionPolicy


@admin.register(ActionPolicy)
class ActionPolicyAdmin(admin.ModelAdmin):
    """Read-only here: a change goes through the console or the API, where a
    loosening waits for a second operator (`workflows.operations.policies`)."""

    list_display = (
        "action",
        "enabled",
        "risk",
        "approvals_required",
        "approval_ttl_seconds",
        "max_attempts",
        "max_in_flight",
        "rate_per_second",
        "version",
        "updated_by",
        "updated_at",
    )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.site.admin_view
def view_on_site(request, content_type_id, object_id):
    """The admin's "view on site" redirect. Django's own lets the
    ValidationError of a malformed UUID key (`/admin/r/<workflow type>/6/`)
    out as a server error; it is a missing object."""
    try:
        return shortcut(request, content_type_id, object_id)
    except ValidationError:
        raise Http404("No such object.") from None
