"""Part (r) of the bench (docs/performance.md#r-client-path), and how parts are chosen."""

import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from workflows.ops.processes import database_url


def test_client_path_part_times_approval_to_complete_at_an_http_client_phase_by_phase(
    transactional_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the web process and cluster it starts read the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "r",
        "--latency-samples",
        "3",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    path = result["client_path"]
    assert path["samples"] == 3 and path["baseline_get_ms"]["n"] == 3
    phases = [path[f"{name}_ms"] for name in ("approve_answered", "requested", "complete", "client")]
    assert all(phase["n"] == 3 and phase["p50"] > 0 for phase in phases)
    # Each sample's step was REQUESTED before it was COMPLETE, and COMPLETE before the waiter heard of it.
    assert phases[1]["p50"] <= phases[2]["p50"] <= phases[3]["p50"]
    assert re.search(r"\(r\) approval -> COMPLETE at an HTTP client ms +p50 [\d.]+, p95 [\d.]+ = [\d.]+ x", report)
    assert [goal["part"] for goal in result["goals"]] == ["r"]


def test_only_and_skip_are_refused_together_and_unknown_parts_named(db):
    with pytest.raises(CommandError, match="give one of them"):
        call_command("bench", "--only", "r", "--skip", "a")
    with pytest.raises(CommandError, match="--only takes some of"):
        call_command("bench", "--only", "z")
