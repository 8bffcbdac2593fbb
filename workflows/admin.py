from django.contrib import admin

from workflows import policy
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
