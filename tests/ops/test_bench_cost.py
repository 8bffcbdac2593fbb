"""The bench counts what a durable step costs, per step of its bursts (b)
and (g): commits, rows written, WAL, and the CPU of the clusters and of
the database sessions serving them, from PostgreSQL's statistics and
/proc (docs/performance.md#the-cost-of-a-step); nothing on SQLite."""

import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from workflows.models import Attempt
from workflows.ops.bench.cost import TICK_US, GroupCPU, ticks
from workflows.ops.bench.parts import by_tenth
from workflows.ops.processes import database_url, descendants


@pytest.mark.live
def test_the_bursts_of_b_and_g_report_their_cost_per_step(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "b,g",
        "--steps",
        "20",
        "--clusters",
        "1",
        "--remote-latency-ms",
        "0",
        "--remote-steps",
        "10",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    (burst,) = result["throughput"]["runs"]
    (remote,) = result["remote"]["runs"]
    # The burst's rate by tenth of its steps, from their own COMPLETE times
    # (none for a tenth that finished within one commit: 2 steps of 20 may).
    assert len(burst["steps_per_s_by_tenth"]) == 10 and any(burst["steps_per_s_by_tenth"]), burst
    assert re.search(r"\(b\) steps/s by tenth of the burst, 1 cluster\(s\) +[\d,-]+(, [\d,-]+){9}; last tenth", report)
    if connection.vendor != "postgresql":
        assert burst["cost_per_step"] is None and remote["cost_per_step"] is None
        assert "cost per" not in report
        return
    for run, steps in ((burst, 20), (remote, 10)):
        cost, window = run["cost_per_step"], run["cost_per_step"]["window"]
        assert window["steps"] == steps and window["settled"], window
        # Each step commits (its claim and REQUESTED attempt, its outcome, COMPLETE; some shared) ...
        assert cost["commits"] > 0 and cost["write_transactions"] > 0, cost
        # ... inserts its attempt and audit events, and moves its step and plan.
        assert cost["rows_inserted"] >= 1 and cost["rows_updated"] >= 1, cost
        written = window["tup_inserted"] + window["tup_updated"] + window["tup_deleted"]
        assert cost["rows_written"] == round(written / steps, 2)
        assert cost["wal_bytes"] >= 1000, cost
        # The server's WAL records (several per step: its rows, its commits), and its full-page
        # images told per step from the window's count.
        assert window["wal_records"] >= 3 * steps, window
        assert cost["wal_full_page_images"] == round(window["wal_full_page_images"] / steps, 2), cost
        assert cost["checkpoints"] == window["checkpoints"], cost
        # Told by table: every step's attempt is among the rows inserted.
        tables = window["rows_by_table"]
        assert tables[Attempt._meta.db_table][0] >= steps, tables
        assert sum(counts[0] for counts in tables.values()) <= window["tup_inserted"], tables
        # The clusters' processes and the backends of their sessions did the work, and were seen doing it.
        assert cost["worker_cpu_us"] > 0 and cost["database_cpu_us"] > 0, cost
        assert window["database_backends"] >= 2 and window["sessions_left_at_start"] == 0, window
        # Main loop, sentinel, pusher, monitor and at least one worker.
        assert window["worker_processes"] >= 5, window
    assert re.search(
        r"\(b\) cost per step, 1 cluster\(s\) +[\d.]+ commits \([\d.]+ that wrote\), [\d.]+ rows written "
        r"\([\d.]+ inserted, [\d.]+ updated, [\d.]+ deleted\), [\d,]+ bytes of WAL \([\d.]+ full-page images; "
        r"\d+ checkpoint\(s\) in the window\); CPU µs: workers [\d,]+, "
        r"database [\d,]+",
        report,
    ), report
    assert re.search(r"\(g\) cost per remote step, 0 ms desk, 1 cluster\(s\) +[\d.]+ commits", report), report


def test_a_burst_is_told_by_tenth_of_its_steps_so_that_a_fade_shows():
    began = datetime(2026, 1, 1, tzinfo=UTC)
    # 1,000 steps: the first tenth in 1 s, each later one 10 % slower than the one before.
    finished, at = [], began
    for tenth in range(10):
        seconds = 1.1**tenth
        finished += [at + timedelta(seconds=seconds * (n + 1) / 100) for n in range(100)]
        at += timedelta(seconds=seconds)
    told = by_tenth(reversed(finished), began)
    assert told["steps_per_s_by_tenth"][0] == 100.0
    assert told["steps_per_s_by_tenth"][-1] == round(100 / 1.1**9, 1)
    assert told["last_tenth_to_first"] == round(round(100 / 1.1**9, 1) / 100, 3)
    assert by_tenth(finished[:9], began) == {}


# A process group whose leader forks a child that spends CPU, then (told to) spends some
# itself once the child has exited unreaped (a zombie: no process of the group has its time).
GROUP = """
import os, sys, time
def spend(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if os.fork() == 0:
    spend(0.6)
    time.sleep(1.0)
    os._exit(0)
print("forked", flush=True)
sys.stdin.readline()
spend(0.4)
print("spent", flush=True)
time.sleep(60)
"""


def test_the_cpu_of_a_cluster_counts_its_forked_processes_whole_and_keeps_what_one_spent_before_it_exited():
    """Counted process by process: a process the leader forked counts from 0,
    so work it did before the cluster was watched (a cluster says it is up
    after its workers began: a burst of a few steps could be over by then,
    and counted nothing) is the cluster's; the leader's own set-up before the
    watch is not; and a process gone at the end takes nothing off what the
    others spent (a group's total at the end less its total at the start
    took its whole life off)."""
    group = subprocess.Popen(
        [sys.executable, "-c", GROUP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert group.stdout.readline() == "forked\n"
        deadline = time.monotonic() + 30
        while (spent := [ticks(pid) or 0 for pid in descendants(group.pid)]) and spent[0] * TICK_US < 500_000:
            assert time.monotonic() < deadline, "the child did not spend its CPU"
            time.sleep(0.05)
        group_at_watch = sum(ticks(pid) or 0 for pid in [group.pid, *descendants(group.pid)])
        cpu = GroupCPU()
        cpu.watch(group.pid)
        (child,) = descendants(group.pid)
        # The leader from its ticks now; the child, forked, from 0.
        assert cpu.processes[group.pid][0] == cpu.processes[group.pid][1], cpu.processes
        assert cpu.processes[child][0] == 0 and cpu.processes[child][1] * TICK_US >= 500_000, cpu.processes
        group.stdin.write("go\n")
        group.stdin.flush()
        assert group.stdout.readline() == "spent\n"
        while descendants(group.pid):  # the child exits: a zombie, out of the group's live processes
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.05)
        cpu.sample()

        # The child's 0.5 s or more before the watch and the leader's 0.4 s
        # after it (less a tick or two of rounding) ...
        assert cpu.ticks * TICK_US >= 850_000, cpu.processes
        # ... where the group's total now less its total then is below zero.
        assert ticks(group.pid) - group_at_watch < 0
    finally:
        group.kill()
        group.wait()
