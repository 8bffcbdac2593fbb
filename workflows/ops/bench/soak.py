"""(q) The chaos soak, everything at once (`manage.py chaos --soak`,
docs/development.md#chaos-soak-and-two-clusters), for `--soak DURATION`
(30m for the figures in docs/performance.md#q-soak): left out
unless a duration is given, since it is long. What it records: the
verdict (lost, duplicate effects, proofs, webhooks, audit), the workload,
and the time to recover from each kill, median and max.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import CommandError

from workflows.ops.bench.common import BenchError


class SoakPart:
    """Part (q), run by the Bench with its options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        if not self.o.soak:
            return {"skipped": True, "why": "give --soak DURATION (e.g. 30m) to run it"}
        workdir = Path(self.bench.workdir) / f"soak-{self.bench.tag}"
        path = workdir / "soak.json"
        workdir.mkdir(parents=True, exist_ok=True)
        failed = None
        try:
            call_command("chaos", "--soak", self.o.soak, "--workdir", str(workdir), "--json", str(path))
        except CommandError as exc:  # the report says why; the figures are still worth keeping
            failed = str(exc)
        if not path.exists():
            raise BenchError(f"the soak wrote no result: {failed}")
        result = json.loads(path.read_text())
        return {
            "duration": self.o.soak,
            "passed": result["passed"],
            "vendor": result["vendor"],
            "workflows": result["workflows"],
            "steps": result["steps"],
            "elapsed_s": round(result["elapsed"], 1),
            "kills": len(result["kills"]),
            "terminated_sessions": result["terminated_sessions"],
            "restarts": len(result["restarts"]),
            "recovery_median_s": result["recovery_median_seconds"],
            "recovery_max_s": result["recovery_max_seconds"],
            "unrecovered": result["unrecovered"],
            "effects": result["effects"],
            "lost": len(result["unsettled"]),
            "duplicates": len(result["duplicates"]),
            "proofs_verified": result["proofs_verified"],
            "webhook_deliveries": result["webhook_deliveries"],
            "webhook_missing": len(result["webhook_missing"]),
            "archived_workflows": result["archived_workflows"],
            "audit_ok": result["audit_ok"],
            "result_file": str(path),
        }
