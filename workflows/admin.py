from django.contrib import admin
from django.contrib.contenttypes.views import shortcut
from django.core.exceptions import ValidationError
from django.http import Http404

from workflows.engine import policy
from workflows.models import ActionPolicy


@admin.register(ActionPolicy)
class ActionPolicyAdmin(admin.ModelAdmin):
    list_display = ("action", "enabled", "risk", "approvals_required", "approval_ttl_seconds", "max_attempts",
                    "version", "updated_by", "updated_at")
    readonly_fields = ("version", "updated_by", "updated_at")

    def save_model(self, request, obj, form, change):
        """Every change is a new, audited version (see policy.update)."""
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name in policy.EDITABLE}
        if not change:
            obj.updated_by = request.user.get_username()
            obj.save()
            changes = {name: getattr(obj, name) for name in policy.EDITABLE}
        policy.update(obj.action, by=request.user, **changes)
        obj.refresh_from_db()


@admin.site.admin_view
def view_on_site(request, content_type_id, object_id):
    """The admin's "view on site" redirect. Django's own lets the
    ValidationError of a malformed UUID key (`/admin/r/<workflow type>/6/`)
    out as a server error; it is a missing object."""
    try:
        return shortcut(request, content_type_id, object_id)
    except ValidationError:
        raise Http404("No such object.") from None
