"""The bench measures every part it reports, and the scale it measures pages
at is sound: seeded history verifies, and list pages run the same queries at
ten times the data, none of them counting a large table.

Parts marked `once` (remote, lanes, chat: no code of their own per database, what they time pinned on both legs
by its own tests) run on PostgreSQL alone; the tiny bench and the list pages' queries run on both."""

import json
import re
import time
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from workflows.audit import archive, journal
from workflows.models import Attempt, AuditEvent, AuditHead, DeadLetter, Workflow
from workflows.ops.bench import common, remote, report
from workflows.ops.bench.memory import MIB, RssSampler
from workflows.ops.processes import database_url

LIST_PAGES = ["/", "/workflows/", "/dead-letters/", "/audit/"]
LARGE_TABLES = re.compile(r'COUNT\(.*FROM "workflows_(workflow|step|attempt|auditevent|deadletter)"', re.S)


def seed(workflows, events):
    call_command("seed_scale", workflows=workflows, events=events, batch=40, stdout=StringIO())


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.live
def test_a_tiny_bench_measures_every_part_with_real_workers(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the clusters it starts work on the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--steps",
        "200",
        "--clusters",
        "1",
        "--raw-seconds",
        "1",
        "--raw-clients",
        "1,2",
        "--only",
        "a,b,c,d,e,f,p",
        "--latency-samples",
        "5",
        "--recovery-runs",
        "1",
        "--seed-workflows",
        "200",
        "--seed-events",
        "2000",
        "--page-requests",
        "3",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    # The table puts the durable rate beside the raw ceiling of the same run.
    assert re.search(r"\(b\) durable steps/s, 1 cluster\(s\) x 2 workers +[\d,]+, [\d.]+ x best raw", report), report
    assert "(f) worker RSS MiB by tenth, 1 cluster(s)" in report and "not judged at this size" in report
    assert result["errors"] == {}
    assert set(result["raw"]["steps_per_s"]) == {"1", "2"}
    assert all(is_number(rate) and rate > 0 for rate in result["raw"]["steps_per_s"].values())
    protocol = result["throughput"]["protocol"]
    alone, shared = protocol["alone"], protocol["shared"]
    assert alone["steps"] == shared["steps"] == 100 and shared["queries_per_step"] > 0
    # One step at a time: a commit for the claim (with the REQUESTED attempt), the outcome and COMPLETE.
    assert alone["commits_per_step"] >= 3
    # Shared batches: the same commits, each for several steps.
    assert shared["commits_per_step"] < alone["commits_per_step"] / 2
    (run,) = result["throughput"]["runs"]
    assert run["steps"] == 200 and run["steps_per_s"] > 0 and run["ratio_to_raw_best"] > 0
    # (c) from the approval's answer: a busy host's worker may request first, never before the approval was sent.
    requested, complete = (result["latency"][f"approval_to_{name}_ms"] for name in ("requested", "complete"))
    assert requested["n"] == complete["n"] == 5 and -result["latency"]["approve_call_ms"]["max"] < requested["p50"]
    assert requested["p50"] < complete["p50"] and all(f["p50"] <= f["p95"] <= f["max"] for f in (requested, complete))
    for mode in ("worker_respawned", "cluster_restarted"):
        (crash,) = result["recovery"][mode]["runs"]
        # The failpoint really killed a worker: its attempt stayed behind and a second one completed the step.
        assert crash["killed_pid"] > 0 and crash["attempts"] >= 2 and crash["seconds"] > 0
    assert result["pages"]["scale"]["workflows"] >= 200 and result["pages"]["scale"]["audit_events"] >= 2000
    for name, page in result["pages"]["pages"].items():
        assert page["queries"] > 0 and 0 < page["p50"] <= page["p95"], name
    (memory,) = result["memory"]["runs"]
    assert memory["worker_processes"] >= 1 and is_number(memory["growth_mib_per_10k_steps"])
    assert all(is_number(memory["worker_rss_mib"][key]) for key in ("start", "peak", "end"))
    (auto,) = result["auto_burst"]["runs"]  # (p): the same burst approved by policy at submission, beside (b)'s
    assert auto["steps"] == 200 and auto["steps_per_s"] > 0 and auto["ratio_to_human_burst"] > 0
    assert re.search(r"\(p\) durable steps/s approved by policy, 1 cluster\(s\) +[\d,]+", report), report
    assert {goal["part"] for goal in result["goals"]} == set("bcdef")


def sampled(workers: dict[int, list[float]]) -> RssSampler:
    """A sampler of one cluster (main pid 1, its sentinel pid 2) whose
    workers (the sentinel's children) had these RSS readings in MiB."""
    sampler = RssSampler([SimpleNamespace(process=SimpleNamespace(pid=1), name="c1")])
    length = max(len(readings) for readings in workers.values())
    series = {1: [76.0] * length, 2: [70.0] * length, **workers}
    sampler.samples = [{pid: int(readings[n] * MIB) for pid, readings in series.items()} for n in range(length)]
    sampler.parents = {1: (1, 0), 2: (1, 1), **{pid: (1, 2) for pid in workers}}
    return sampler


def test_the_pool_rate_is_told_before_and_after_and_a_result_of_an_older_bench_still_reads():
    pool = {"threads": 128, "calls_per_s": 200.0}
    assert report._pool_rate({"thread_pool": pool}) == "200.0/s"
    ceilings = {
        "thread_pool": pool,
        "thread_pool_after": {"threads": 128, "calls_per_s": 300.0},
        "thread_pool_mean_calls_per_s": 250.0,
    }
    assert report._pool_rate(ceilings) == "200.0/s before, 300.0/s after, mean 250.0/s"


def test_cpu_stolen_by_the_hypervisor_is_told_from_proc_stat(tmp_path, monkeypatch):
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 7 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    monkeypatch.setattr(common, "Path", lambda path: stat if path == "/proc/stat" else Path(path))
    before = common.host_cpu()
    assert before == (1000, 40)  # guest time is in user already
    stat.write_text("cpu  200 0 100 1400 10 0 0 290 7 0\n")
    after = common.host_cpu()
    assert after == (2000, 290)
    assert common.stolen_percent(before, after) == 25.0
    assert common.stolen_percent(None, after) is None and common.stolen_percent(after, after) is None
    stat.write_text("intr 1 2 3\n")
    assert common.host_cpu() is None


def test_memory_growth_is_told_from_warm_up():
    warm_then_flat = [64.0] * 5 + [74.0] * 95
    leaking = [64.0] * 5 + [74.0 + n / 10 for n in range(95)]  # +9.4 MiB over the run

    flat = sampled({10: warm_then_flat, 11: warm_then_flat}).summary({10: 50_000, 11: 50_000})
    grown = sampled({10: leaking, 11: warm_then_flat}).summary({10: 50_000, 11: 50_000})

    assert flat["growth_mib_per_10k_steps"] == 0
    assert flat["worker_rss_mib_by_tenth"] == [64.0] + [74.0] * 10
    # 7.9 MiB over the last four fifths of one worker's 50,000 steps: the
    # steady worker beside it does not dilute the leak.
    assert grown["growth_mib_per_10k_steps"] == pytest.approx(7.9 / 40_000 * 10_000, abs=0.01)
    assert common.goals({"memory": {"runs": [{"steps": 100_000, **grown}]}})[0]["met"] is False
    assert grown["worker_rss_mib_by_tenth"][-1] == 83.4


def test_cpu_per_step_counts_only_the_middle_of_the_burst_by_kind_of_process():
    """One sample a second over 10 s; 100 steps, ten a second. Start-up
    (the first second's 500 ticks) and the tail lie outside the samples
    taken within the middle 80% of the starts (10th at 1001.05 s, 90th at
    1009.05 s: the samples at 1002 and 1009 s); between those two, each
    kind's ticks are divided by the steps that started there."""
    import os

    sampler = RssSampler([])
    for second in range(11):
        sampler.times.append(1000.0 + second)
        sampler.host.append(500 + 10 * second)
        sampler.cpu.append({10: 500 + 4 * second, 11: 500 + 4 * second, 12: 100 + second, "desk": 3 * second})
    started = [1000.0 + n / 10 + 0.05 for n in range(100)]

    cpu = sampler.cpu_per_step({10: 50, 11: 50}, started)

    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    assert cpu["steps"] == 70 and cpu["seconds"] == 7
    assert cpu["workers"] == pytest.approx(2 * 4 * 7 * tick_ms / 70, abs=0.01)
    assert cpu["cluster_other"] == pytest.approx(7 * tick_ms / 70, abs=0.01)
    assert cpu["desk"] == pytest.approx(3 * 7 * tick_ms / 70, abs=0.01)
    assert cpu["host"] == pytest.approx(10 * 7 * tick_ms / 70, abs=0.01)
    assert sampler.cpu_per_step({10: 5}, started[:10]) is None  # too few steps to bracket


@pytest.mark.parametrize("steps, growth, met", [(99_999, 0.0, None), (100_000, 0.9, True), (100_000, 1.5, False)])
def test_memory_is_judged_only_over_100k_steps(steps, growth, met):
    result = {"memory": {"runs": [{"clusters": 1, "steps": steps, "growth_mib_per_10k_steps": growth}]}}

    assert [goal["met"] for goal in common.goals(result) if goal["part"] == "f"] == [met]


@pytest.mark.parametrize("events", [300, 3000], ids=["trails-cut", "trails-padded"])
def test_seeded_history_forms_valid_audit_chains(db, events):
    seed(60, events)

    assert Workflow.objects.count() == 60 and AuditEvent.objects.count() == events
    assert {"PLANNED", "COMPLETE", "FAILED"} <= set(Workflow.objects.values_list("status", flat=True))
    assert DeadLetter.objects.open().count() == Workflow.objects.filter(status="FAILED").count()
    verdict = journal.verify()
    assert verdict.ok, verdict.problems[:5]
    assert verdict.events == events and verdict.streams == AuditHead.objects.count()
    # The chains are really checked: a head that no longer matches its chain is reported.
    AuditHead.objects.filter(pk=AuditHead.objects.first().pk).update(hash="f" * 64)
    assert not journal.verify().ok


def page_queries(client) -> dict[str, list[str]]:
    statements = {}
    for url in LIST_PAGES:
        client.get(url)  # first-use rows (sessions, policies) are not what is measured
        with CaptureQueriesContext(connection) as queries:
            assert client.get(url).status_code == 200
        statements[url] = [query["sql"] for query in queries]
    return statements


def test_list_pages_run_the_same_queries_at_ten_times_the_data(db, client, people):
    client.force_login(people["admin"])  # reviewer, operator and auditor: every page shows all it can
    seed(50, 500)
    small = page_queries(client)

    seed(450, 4500)
    large = page_queries(client)

    assert Workflow.objects.count() == 500
    assert {url: len(sql) for url, sql in large.items()} == {url: len(sql) for url, sql in small.items()}
    assert not [sql for statements in large.values() for sql in statements if LARGE_TABLES.search(sql)]


@pytest.mark.live
@pytest.mark.once_postgres
def test_remote_part_runs_ticket_steps_through_clusters_beside_a_thread_pool_ceiling(
    transactional_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "g",
        "--clusters",
        "1",
        "--remote-latency-ms",
        "0,50",
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
    runs = result["remote"]["runs"]
    assert [(run["latency_ms"], run["clusters"]) for run in runs] == [(0, 1), (50, 1)]
    for run in runs:
        # Every step was a real ticket on the desk (the part checks its ledger), made through the protocol.
        assert run["steps"] == 10 and run["workflows"] == 2
        pool, desk = run["ceilings"]["thread_pool"], run["ceilings"]["desk"]
        assert (
            pool["threads"] == result["remote"]["concurrency_per_worker"] * 2 and desk["threads"] == 2 * pool["threads"]
        )
        assert pool["calls_per_s"] > 0 and desk["calls_per_s"] > 0 and run["steps_per_s"] > 0
        # Judged against the pool's mean rate before and after the engine's run (the host's speed drifts).
        after = run["ceilings"]["thread_pool_after"]
        assert after["threads"] == pool["threads"] and after["calls_per_s"] > 0
        mean = run["ceilings"]["thread_pool_mean_calls_per_s"]
        assert mean == round((pool["calls_per_s"] + after["calls_per_s"]) / 2, 1)
        assert run["ratio_to_thread_pool"] == round(run["steps_per_s"] / mean, 3)
        effect = run["approval_to_effect_ms"]
        assert effect["n"] == 10 and 0 < effect["p50"] <= effect["p95"] <= effect["max"]
        assert run["memory"]["worker_processes"] >= 1 and is_number(run["memory"]["growth_mib_per_10k_steps"])
        database = run["database_per_step"]
        if connection.vendor == "postgresql":
            # Each remote step commits its claim, REQUESTED attempt, outcome and COMPLETE (some shared with
            # other steps), and writes its attempt, moves and audit events to the log.
            assert 0 < database["write_transactions"] and database["wal_kib"] >= 1, database
        else:
            assert database is None
    for run in runs:
        assert 0 <= run["cpu_stolen_percent"] <= 100, run["cpu_stolen_percent"]
    assert 0 <= result["meta"]["cpu_stolen_percent"] <= 100 and "host_cpu_before" not in result["meta"]
    assert re.search(r"% of CPU time stolen by the hypervisor", report) and "; host CPU stolen " in report, report
    # The desk really held the latency fault of each run, as it reported it.
    assert runs[0]["desk_faults"] == []
    assert [(fault["mode"], fault["ms"]) for fault in runs[1]["desk_faults"]] == [("latency", 50)]
    assert re.search(
        r"\(g\) remote steps/s, 50 ms desk, 1 cluster\(s\) +[\d,.]+ = [\d.]+ x thread pool of \d+ "
        r"\([\d,.]+/s before, [\d,.]+/s after, mean [\d,.]+/s;",
        report,
    ), report
    goals = [goal for goal in result["goals"] if goal["part"] == "g"]
    # No 300 ms run here, and far fewer than 100k steps: only the 0 ms ratio is judged.
    assert [goal["met"] is None for goal in goals] == [False, True]


@pytest.mark.live
@pytest.mark.once_postgres
def test_an_answer_lost_on_a_busy_host_is_reconciled_and_counted_not_a_failed_run(
    transactional_db, tmp_path, monkeypatch
):
    """A busy host can time an answer out. The engine settles that attempt by
    lookup, as it should; the run still counts each step once at the desk and
    says how many attempts did not simply succeed."""
    monkeypatch.setenv("DATABASE_URL", database_url())
    engine_run = remote.RemotePart.engine_run

    def with_a_lost_answer(part, desk, latency, count):
        requests.post(
            f"{desk.url}/_faults", json={"mode": "commit_then_drop", "count": 1}, timeout=5
        ).raise_for_status()
        return engine_run(part, desk, latency, count)

    monkeypatch.setattr(remote.RemotePart, "engine_run", with_a_lost_answer)
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "g",
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
    [run] = result["remote"]["runs"]
    assert run["steps"] == 10 and run["steps_per_s"] > 0
    # The answer the desk dropped was for a ticket it had created: found by lookup, not created again.
    assert run["attempts"] == {"total": 10, "by_status": {"SUCCEEDED": 9, "RECONCILED": 1}}, run["attempts"]
    assert "; attempts: 1 RECONCILED of 10" in report, report


@pytest.mark.live
def test_waiters_part_answers_each_waiter_soon_after_its_decision_through_a_real_web_server(
    transactional_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the web server it starts serves the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "h",
        "--waiters",
        "8",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    waiters = result["waiters"]
    assert waiters["waiters"] == waiters["answered"] == 8
    delay = waiters["answer_after_decision_ms"]
    # Each answered after its own decision (never before it), within a second even on SQLite's reads.
    assert delay["n"] == 8 and 0 < delay["p50"] <= delay["p95"] <= delay["max"] < 1000
    threads = waiters["server_threads"]
    assert threads["during"] <= threads["before"] + waiters["web_threads_setting"] + 1
    if connection.vendor == "postgresql":
        assert waiters["server_database_sessions_during"] <= waiters["web_threads_setting"] + 1
    assert re.search(r"\(h\) 8 waiters, answer after decision ms +p50 [\d.]+, p95", report), report
    (goal,) = [goal for goal in result["goals"] if goal["part"] == "h"]
    assert goal["met"] is None  # far fewer than 200 waiters: reported, not judged
    assert set(Workflow.objects.values_list("status", flat=True)) == {"REJECTED"}


@pytest.mark.live
def test_bulk_part_reconciles_and_replays_an_outage_with_each_key_once(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the cluster it starts works on the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "i",
        "--dead-letters",
        "12",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    bulk = result["bulk"]
    assert (bulk["dead_letters"], bulk["landed"], bulk["tickets"], bulk["each_key_once"]) == (12, 6, 12, True)
    assert (bulk["reconcile"]["applied"], bulk["reconcile"]["safe"], bulk["reconcile"]["in_doubt"]) == (6, 6, 0)
    assert (bulk["replay"]["replayed"], bulk["replay"]["failed"]) == (6, 0)
    assert re.search(r"\(i\) 12 dead letters, reconcile / replay s +[\d.]+", report), report
    (goal,) = [goal for goal in result["goals"] if goal["part"] == "i"]
    assert goal["met"] is True


def test_archive_part_archives_seeded_history_while_a_cluster_runs_live_plans(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the cluster it starts works on the test database
    json_path, out = tmp_path / "bench.json", StringIO()
    began, delete = timezone.now(), archive._delete

    def once_workers_moved(*args):
        """200 workflows archive in well under a second, before a cluster
        that just started takes any work: the deletes wait (out of any
        transaction, files and audit event written) until a live step
        finished, which it cannot while the archive holds what workers need."""
        deadline = time.monotonic() + 60
        live = Attempt.objects.filter(finished_at__gte=began).exclude(step__workflow__name__startswith="seeded")
        while not live.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return delete(*args)

    monkeypatch.setattr(archive, "_delete", once_workers_moved)
    call_command(
        "bench",
        "--only",
        "j",
        "--archive-workflows",
        "200",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    archived = result["archive"]
    # The seeded mix is 80% finished (COMPLETE, REJECTED) and nothing of it in flight: those, and only those, go.
    assert archived["archived"] == archived["deleted"] == 160 and archived["kept"] == 0
    assert archived["live_plans"] == 20 and archived["live_complete"] == 20
    # The workers went on while the archive ran: steps finished between its start and its end.
    assert archived["steps_done_during_archive"] > 0
    assert is_number(archived["peak_rss_mib"]) and archived["seconds"] > 0
    assert re.search(r"\(j\) archive 160 workflows while workers run +[\d.]+ s", report), report
    (goal,) = [goal for goal in result["goals"] if goal["part"] == "j"]
    assert goal["met"] is None  # far fewer than 100k: reported, not judged
    assert Workflow.objects.filter(status__in=["COMPLETE", "REJECTED"], name__startswith="seeded").count() == 0
    assert journal.verify().ok  # the archived streams, signed by the checkpoint, are held to the archive


@pytest.mark.live
@pytest.mark.once_postgres
def test_lanes_part_times_notices_and_previews_idle_and_under_a_backlog_of_due_steps(
    transactional_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the clusters it starts work on the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "k",
        "--lanes-steps",
        "1500",  # two samples 0.25 s apart need a backlog of a second or more
        "--lanes-samples",
        "2",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    lanes = result["lanes"]
    assert lanes["steps"] == 1500 and lanes["idle"]["notice"]["n"] == 2
    assert lanes["backlog"]["notice"]["n"] == 2 and lanes["backlog"]["previews"]["n"] == 2
    # Each sample counts the backlog's steps unfinished when its notice came (that the count stays high
    # is what tests/engine/test_queue_lanes.py pins, with a slow desk; here noop steps drain in seconds).
    unfinished = lanes["backlog"]["unfinished_steps_at_notice"]
    assert unfinished["n"] == 2 and 0 <= unfinished["p50"] <= unfinished["max"] <= 1500
    assert lanes["one_queue"]["notice"]["n"] >= 1  # and the same on one queue, for comparison
    assert is_number(lanes["ratio_p50"]["notice"]) and is_number(lanes["ratio_p95"]["previews"])
    assert re.search(r"\(k\) notice / previews ms under 1,500 due steps +p50 [\d.]+ / [\d.]+", report), report
    assert set(Workflow.objects.filter(name__startswith="bench k").values_list("status", flat=True)) == {"COMPLETE"}


def test_analytics_part_seeds_decisions_and_times_the_api_against_a_trivial_get(
    transactional_db, tmp_path, monkeypatch
):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the web process it starts reads the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "l",
        "--analytics-decisions",
        "300",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    found = result["analytics"]
    assert (found["decisions"], found["seeded"]) == (300, 300)
    # Every team's endings counted by the global auditor's answer over the 90 days seeded.
    assert found["all_teams_decisions_counted"] == 300
    assert set(found["answers_ms"]) == {"default (30d)", "since 90d", "since 90d, one action"}
    assert all(times["n"] == 30 and times["p50"] > 0 for times in found["answers_ms"].values())
    assert found["baseline_ms"]["n"] == 30
    assert re.search(r"\(l\) analytics API, since 90d, ms +p50 [\d.]+, p95 [\d.]+ = [\d.]+ x a trivial GET", report)


@pytest.mark.once_postgres
def test_chat_part_times_submissions_to_the_slack_stand_in_under_a_backlog(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", database_url())  # the cluster it starts works on the test database
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "m",
        "--chat-samples",
        "3",
        "--chat-backlog",
        "50",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    chat = result["chat"]
    assert chat["backlog_steps_queued"] == 50 and chat["submissions"] == chat["posted"] == 3
    delay = chat["submission_to_post_ms"]
    assert delay["n"] == 3 and 0 < delay["p50"] <= delay["p95"] <= delay["max"]
    # Those that came while backlog steps were still due are reported apart (none to all three of them).
    assert 0 <= chat["submission_to_post_ms_while_steps_due"]["n"] <= 3
    assert re.search(r"\(m\) 3 plans, submission to Slack post ms +p50 [\d.]+", report), report


def test_policies_part_times_evaluation_per_step_and_its_share_of_submit_to_approved(db, tmp_path):
    json_path, out = tmp_path / "bench.json", StringIO()

    call_command(
        "bench",
        "--only",
        "o",
        "--policy-sizes",
        "2,5",
        "--policy-samples",
        "4",
        "--policy-path-samples",
        "3",
        "--workdir",
        str(tmp_path),
        "--json",
        str(json_path),
        stdout=out,
    )

    result, report = json.loads(json_path.read_text()), out.getvalue()
    assert result["errors"] == {}
    policies = result["policies"]
    assert policies["baseline"]["path_ms"]["n"] == 3 and policies["steps_per_plan"] == 5
    assert [(size["policies"], size["version"]) for size in policies["sizes"]] == [(2, 1), (5, 2)]
    for size in policies["sizes"]:
        assert size["per_step_us"]["n"] == 4 and 0 < size["per_step_us"]["p50"] <= size["per_step_us"]["p99"]
        assert size["path_ms"]["n"] == size["policy_ms"]["n"] == 3
        # The policies were timed inside each submission, and are a part of the path, not all of it.
        assert 0 < size["policy_share_of_path"] < 1 and size["policy_ms"]["p50"] > 0
        assert is_number(size["path_ratio_p50_to_baseline"]) and is_number(size["first_evaluation_ms"])
    assert re.search(r"\(o\) 5 policies, evaluation µs per step +p50 [\d.]+, p99 [\d.]+", report), report
    assert re.search(
        r"\(o\) 2 policies, submit -> APPROVED ms +p50 [\d.]+, p95 [\d.]+ = [\d.]+ x no policy set", report
    )
    # Each plan measured (3 to warm up, 3 without a policy set, 3 per size) is cancelled: none is left due.
    measured = Workflow.objects.filter(name__startswith="bench policies")
    assert measured.count() == 3 + 3 + 2 * 3 and set(measured.values_list("status", flat=True)) == {"CANCELLED"}
