from django.db import migrations, models


def asked_at_submission(apps, schema_editor):
    """What each plan's steps kept of the permits that asked people for
    something, gathered onto the plan, so plans submitted before this
    migration answer to it too."""
    Step = apps.get_model("workflows", "Step")
    Workflow = apps.get_model("workflows", "Workflow")
    asks = {}
    rows = Step.objects.filter(lane=0, policy_decision__by="human").order_by("workflow_id", "position")
    for workflow_id, key, found in rows.values_list("workflow_id", "key", "policy_decision").iterator():
        group = found.get("group")
        if not (found.get("approvals") or group):
            continue
        ask = asks.setdefault(workflow_id, {"approvals": None, "groups": [], "policies": [], "steps": []})
        if found.get("approvals"):
            ask["approvals"] = max(ask["approvals"] or 0, found["approvals"])
        ask["groups"] = sorted({*ask["groups"], *([group] if group else [])})
        # The policies that decided: those that asked are among them.
        ask["policies"] = sorted({*ask["policies"], *(found.get("policies") or [])})
        ask["steps"].append(key)
    for workflow_id, ask in asks.items():
        Workflow.objects.filter(pk=workflow_id, restored_at__isnull=True).update(policy_asks=ask)


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0039_approval_basis"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="policy_asks",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(asked_at_submission, migrations.RunPython.noop),
    ]
