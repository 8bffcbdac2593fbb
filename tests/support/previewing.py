"""Effect previews as a worker takes them and a reviewer approves them."""

import time

from workflows.models import Step


def wait_for_previews(workflow_id, timeout=30.0) -> dict[str, Step]:
    """Poll until no step of the workflow has its preview pending."""
    deadline = time.monotonic() + timeout
    while Step.objects.filter(workflow_id=workflow_id, preview_state="PENDING").exists():
        assert time.monotonic() < deadline, "the worker never took the previews"
        time.sleep(0.1)
    return {step.key: step for step in Step.objects.filter(workflow_id=workflow_id)}


def approve_shown(client, workflow_id):
    """Approve over the API with the previews the workflow shows now."""
    shown = client.get(f"/workflows/{workflow_id}").json()
    digests = {step["key"]: step["preview"]["digest"] for step in shown["steps"] if step["preview"]["digest"]}
    answer = client.post(f"/workflows/{workflow_id}/approve", {"preview_digests": digests})
    assert answer.status_code == 200, answer.json()
    return digests
