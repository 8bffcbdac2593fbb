"""The bench's printed table, from its result."""


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [
        f"bench on {meta['vendor']} ({meta['database']}), {meta['cpus']} CPUs, load "
        f"{'/'.join(f'{x:.1f}' for x in meta['load_before'])} before, "
        f"{'/'.join(f'{x:.1f}' for x in meta['load_after'])} after"
        + (f", autovacuum {meta['autovacuum']}" if meta["autovacuum"] else "")
        + f", task broker {meta.get('broker', 'orm')}"
        + (
            f", {stolen}% of CPU time stolen by the hypervisor"
            if (stolen := meta.get("cpu_stolen_percent")) is not None
            else ""
        ),
        "",
    ]
    rows = []
    raw = result.get("raw", {}).get("steps_per_s", {})
    if raw:
        rows.append(("(a) raw 2-commit steps/s", ", ".join(f"{n} clients {v:,.0f}" for n, v in raw.items())))
    throughput = result.get("throughput", {})
    for mode, protocol in throughput.get("protocol", {}).items():
        rows.append(
            (
                f"(b) protocol per step, {mode} (in-process)",
                f"{protocol['queries_per_step']} queries, {protocol['commits_per_step']} commits; "
                f"{protocol['serial_steps_per_s']:,.0f} steps/s serial",
            )
        )
    for run in throughput.get("runs", []):
        ratio = f" = {run['ratio_to_raw_4']} x raw at 4 clients" if run.get("ratio_to_raw_4") else ""
        best = f", {run['ratio_to_raw_best']} x best raw" if run.get("ratio_to_raw_best") else ""
        rows.append(
            (
                f"(b) durable steps/s, {run['clusters']} cluster(s) x {run['workers'] // run['clusters']} workers",
                f"{run['steps_per_s']:,.0f}{ratio}{best} ({run['steps']} steps in {run['seconds']} s; "
                f"first effect {run['first_effect_after_start_s']} s after the cluster started)",
            )
        )
        if tenths := run.get("steps_per_s_by_tenth"):
            rows.append(
                (
                    f"(b) steps/s by tenth of the burst, {run['clusters']} cluster(s)",
                    f"{', '.join(f'{rate:,.0f}' if rate else '-' for rate in tenths)}; "
                    f"last tenth {run['last_tenth_to_first']} x the first",
                )
            )
        if cost := run.get("cost_per_step"):
            rows.append((f"(b) cost per step, {run['clusters']} cluster(s)", _cost(cost)))
    for run in result.get("auto_burst", {}).get("runs", []):
        ratio = f" = {run['ratio_to_raw_4']} x raw at 4 clients" if run.get("ratio_to_raw_4") else ""
        beside = f", {run['ratio_to_human_burst']} x (b)'s burst" if run.get("ratio_to_human_burst") else ""
        rows.append(
            (
                f"(p) durable steps/s approved by policy, {run['clusters']} cluster(s)",
                f"{run['steps_per_s']:,.0f}{ratio}{beside} ({run['steps']} steps in {run['seconds']} s; "
                f"submitted and approved at submission in {run['submit_seconds']} s)",
            )
        )
        if cost := run.get("cost_per_step"):
            rows.append((f"(p) cost per step, {run['clusters']} cluster(s)", _cost(cost)))
    if "passed" in (soak := result.get("soak", {})):
        rows.append(
            (
                f"(q) chaos soak {soak['duration']}, {soak['vendor']}",
                f"{'PASS' if soak['passed'] else 'FAIL'}: {soak['workflows']} plans, {soak['kills']} kills, "
                f"lost {soak['lost']}, duplicates {soak['duplicates']}; recovery s median "
                f"{soak['recovery_median_s']}, max {soak['recovery_max_s']}",
            )
        )
    latency = result.get("latency", {})
    for key, label in (
        ("approval_to_requested_ms", "approval -> REQUESTED"),
        ("approval_to_complete_ms", "approval -> COMPLETE"),
    ):
        if key in latency:
            s = latency[key]
            rows.append((f"(c) {label} ms", f"p50 {s['p50']}, p95 {s['p95']}, max {s['max']} ({s['n']} samples)"))
    recovery = result.get("recovery", {})
    for key, label in (("worker_respawned", "worker respawned"), ("cluster_restarted", "fresh cluster")):
        if key in recovery:
            r = recovery[key]
            rows.append((f"(d) SIGKILL -> COMPLETE s, {label}", f"median {r['median_s']}, max {r['max_s']}"))
    if pages := result.get("pages", {}).get("pages"):
        scale = result["pages"]["scale"]
        rows.append(
            (
                "(e) scale",
                f"{scale['workflows']:,} workflows, {scale['audit_events']:,} audit events, "
                f"{scale['dead_letters']:,} dead letters",
            )
        )
        for name, page in pages.items():
            counts = f", {len(page['count_queries'])} COUNT" if page["count_queries"] else ""
            url = "/workflows/<id>/" if name == "workflow" else page["url"]
            rows.append((f"(e) {url} ms", f"p50 {page['p50']}, p95 {page['p95']} ({page['queries']} queries{counts})"))
    for run in result.get("memory", {}).get("runs", []):
        w, m = run["worker_rss_mib"], run["main_rss_mib"]
        rows.append(
            (
                f"(f) RSS MiB, {run['clusters']} cluster(s)",
                f"workers {w['start']}/{w['peak']}/{w['end']} (start/peak/end, {run['worker_processes']} pids), "
                f"main {m['start']}/{m['peak']}/{m['end']}; "
                f"{run['growth_mib_per_10k_steps']:+} MiB per 10k steps after warm-up",
            )
        )
        if timeline := run.get("worker_rss_mib_by_tenth"):
            rows.append(
                (
                    f"(f) worker RSS MiB by tenth, {run['clusters']} cluster(s)",
                    " ".join("-" if value is None else f"{value}" for value in timeline),
                )
            )
    for run in result.get("remote", {}).get("runs", []):
        pool, desk, lat = run["ceilings"]["thread_pool"], run["ceilings"]["desk"], run["approval_to_effect_ms"]
        rows.append(
            (
                f"(g) remote steps/s, {run['latency_ms']} ms desk, {run['clusters']} cluster(s)",
                f"{run['steps_per_s']:,.1f} = {run['ratio_to_thread_pool']} x thread pool of {pool['threads']} "
                f"({_pool_rate(run['ceilings'])}; desk at {desk['threads']} threads {desk['calls_per_s']:,.1f}/s); "
                f"approval -> effect p50 {lat['p50']:,.0f}, p95 {lat['p95']:,.0f} ms; "
                f"worker RSS end {run['memory']['worker_rss_mib']['end']} MiB, "
                f"{run['memory']['growth_mib_per_10k_steps']:+} MiB per 10k steps ({run['steps']} steps)"
                + (
                    f"; database per step {db['write_transactions']} write transactions, {db['wal_kib']} KiB of WAL"
                    if (db := run.get("database_per_step"))
                    else ""
                )
                + (
                    f"; CPU ms per step: workers {cpu.get('workers', 0)}, rest of the clusters "
                    f"{cpu.get('cluster_other', 0)}, desk {cpu.get('desk', 0)}, whole host {cpu['host']}"
                    if (cpu := run.get("cpu_ms_per_step"))
                    else ""
                )
                + _attempts_not_succeeded(run.get("attempts"))
                + (f"; host CPU stolen {stolen}%" if (stolen := run.get("cpu_stolen_percent")) is not None else ""),
            )
        )
        if cost := run.get("cost_per_step"):
            rows.append(
                (f"(g) cost per remote step, {run['latency_ms']} ms desk, {run['clusters']} cluster(s)", _cost(cost))
            )
    if "answered" in (waiters := result.get("waiters", {})):
        delay, threads = waiters["answer_after_decision_ms"], waiters["server_threads"]
        sessions = waiters["server_database_sessions_during"]
        rows.append(
            (
                f"(h) {waiters['waiters']} waiters, answer after decision ms",
                f"p50 {delay['p50']}, p95 {delay['p95']}, max {delay['max']} ({waiters['decided_per_s']:,.0f} "
                f"decisions/s); web process threads {threads['before']} -> {threads['during']} while they wait"
                + (f", {sessions} database sessions" if sessions is not None else "")
                + f", RSS +{waiters['server_rss_mib']['per_waiter_kib']} KiB per waiter",
            )
        )
    if "posted" in (chat := result.get("chat", {})):
        delay, still = chat["submission_to_post_ms"], chat["backlog_due_at_arrival"]
        rows.append(
            (
                f"(m) {chat['submissions']} plans, submission to Slack post ms",
                f"p50 {delay['p50']}, p95 {delay['p95']}, max {delay['max']} under a backlog of "
                f"{chat['backlog_steps_queued']:,} due steps; still due at arrival p50 {still['p50']:,.0f}, "
                f"p95 {still['p95']:,.0f}; {chat['posted']}/{chat['submissions']} posted"
                + (
                    f"; the {under['n']} that arrived while steps were still due: p50 {under['p50']}, "
                    f"p95 {under['p95']}, max {under['max']}"
                    if (under := chat.get("submission_to_post_ms_while_steps_due", {})).get("n")
                    else ""
                ),
            )
        )
    if "each_key_once" in (bulk := result.get("bulk", {})):
        rows.append(
            (
                f"(i) {bulk['dead_letters']:,} dead letters, reconcile / replay s",
                f"{bulk['reconcile']['seconds']} ({bulk['reconcile']['per_s']:,.0f}/s; "
                f"{bulk['reconcile']['applied']:,} applied, {bulk['reconcile']['safe']:,} safe) / "
                f"{bulk['replay']['seconds']} ({bulk['replay']['replayed']:,} replayed, complete after "
                f"{bulk['replay']['complete_after_s']} s); each key once: {bulk['each_key_once']}",
            )
        )
    if "archived" in (archived := result.get("archive", {})):
        rows.append(
            (
                f"(j) archive {archived['archived']:,} workflows while workers run",
                f"{archived['seconds']} s ({archived['workflows_per_s']:,} workflows/s, {archived['rows']:,} rows, "
                f"{archived['files_mib']} MiB of files); peak RSS {archived['peak_rss_mib']} MiB "
                f"(+{archived['rss_growth_mib']}); {archived['steps_done_during_archive']} steps done meanwhile, "
                f"{archived['live_complete']}/{archived['live_plans']} live plans COMPLETE; verify_archive "
                f"{archived['verify_s']} s",
            )
        )
    if "backlog" in (lanes := result.get("lanes", {})):
        idle, busy = lanes["idle"], lanes["backlog"]
        rows.append(
            (
                f"(k) notice / previews ms under {lanes['steps']:,} due steps",
                f"p50 {busy['notice']['p50']} / {busy['previews']['p50']}, p95 {busy['notice']['p95']} / "
                f"{busy['previews']['p95']} (idle p50 {idle['notice']['p50']} / {idle['previews']['p50']}, "
                f"p95 {idle['notice']['p95']} / {idle['previews']['p95']}; ratio p50 {lanes['ratio_p50']['notice']} / "
                f"{lanes['ratio_p50']['previews']}, p95 {lanes['ratio_p95']['notice']} / "
                f"{lanes['ratio_p95']['previews']}); {busy['unfinished_steps_at_notice']['p50']:,.0f} steps "
                "unfinished at the median notice"
                + (
                    f"; on one queue p50 {one['notice']['p50']} / {one['previews']['p50']}, "
                    f"{one['unfinished_steps_at_notice']['p50']:,.0f} unfinished"
                    if (one := lanes.get("one_queue"))
                    else ""
                ),
            )
        )
    if "answers_ms" in (found := result.get("analytics", {})):
        base = found["baseline_ms"]
        for label, times in found["answers_ms"].items():
            rows.append(
                (
                    f"(l) analytics API, {label}, ms",
                    f"p50 {times['p50']}, p95 {times['p95']} = {found['ratio_p50_to_baseline'][label]} x a trivial "
                    f"GET (p50 {base['p50']}, p95 {base['p95']}); {found['largest_team_decisions']:,} of "
                    f"{found['decisions']:,} decisions in the token's team",
                )
            )
        every = found["all_teams_in_process_ms"]
        rows.append(("(l) analytics, every team, in-process ms", f"p50 {every['p50']}, max {every['max']}"))
    if "sizes" in (policies := result.get("policies", {})):
        base = policies["baseline"]["path_ms"]
        for size in policies["sizes"]:
            step, path, inside = size["per_step_us"], size["path_ms"], size["policy_ms"]
            rows.append(
                (
                    f"(o) {size['policies']:,} policies, evaluation µs per step",
                    f"p50 {step['p50']}, p99 {step['p99']} ({policies['steps_per_plan']}-step plans; the first "
                    f"evaluation of the version {size['first_evaluation_ms']} ms)",
                )
            )
            rows.append(
                (
                    f"(o) {size['policies']:,} policies, submit -> APPROVED ms",
                    f"p50 {path['p50']}, p95 {path['p95']} = {size['path_ratio_p50_to_baseline']} x no policy set "
                    f"(p50 {base['p50']}); policies p50 {inside['p50']} ms, "
                    f"{100 * size['policy_share_of_path']:.1f}% of the path",
                )
            )
    if "client_ms" in (path := result.get("client_path", {})):
        base = path["baseline_get_ms"]
        rows.append(
            (
                "(r) approval -> COMPLETE at an HTTP client ms",
                f"p50 {path['client_ms']['p50']}, p95 {path['client_ms']['p95']} = {path['client_x_get']} x a trivial "
                f"GET (p50 {base['p50']}); from the approval sent, p50: answered {path['approve_answered_ms']['p50']}, "
                f"REQUESTED {path['requested_ms']['p50']}, COMPLETE {path['complete_ms']['p50']}",
            )
        )
    width = max((len(name) for name, _ in rows), default=0)
    lines += [f"{name.ljust(width)}  {value}" for name, value in rows]
    lines += ["", "goals (reported, not asserted):"]
    for goal in result["goals"]:
        met = {True: "met", False: "NOT met", None: "not judged at this size"}[goal["met"]]
        lines.append(f"  ({goal['part']}) {goal['goal']}: {goal['value']} -> {met}")
    for letter, error in result["errors"].items():
        lines.append(f"  ({letter}) FAILED: {error}")
    return "\n".join(lines)


def _pool_rate(ceilings: dict) -> str:
    """The thread pool's rate before and after the engine's run, and the
    mean the run is judged against; a result of an older bench has one."""
    before = ceilings["thread_pool"]["calls_per_s"]
    if "thread_pool_after" not in ceilings:
        return f"{before:,.1f}/s"
    return (
        f"{before:,.1f}/s before, {ceilings['thread_pool_after']['calls_per_s']:,.1f}/s after, "
        f"mean {ceilings['thread_pool_mean_calls_per_s']:,.1f}/s"
    )


def _attempts_not_succeeded(attempts: dict | None) -> str:
    """`; attempts: 1 RECONCILED of 2001` when any attempt of a (g) run did
    not simply succeed (an answer timed out on a busy host), else nothing."""
    if not attempts:
        return ""
    others = {status: n for status, n in sorted(attempts["by_status"].items()) if status != "SUCCEEDED"}
    if not others:
        return ""
    return "; attempts: " + ", ".join(f"{n} {status}" for status, n in others.items()) + f" of {attempts['total']}"


def _cost(cost: dict) -> str:
    """A burst's cost per step (workflows.ops.bench.cost), as the table shows it."""
    window = cost["window"]
    return (
        f"{cost['commits']} commits ({cost['write_transactions']} that wrote), "
        f"{cost['rows_written']} rows written ({cost['rows_inserted']} inserted, "
        f"{cost['rows_updated']} updated, {cost['rows_deleted']} deleted), {cost['wal_bytes']:,} bytes of WAL "
        f"({cost['wal_full_page_images']} full-page images; {cost['checkpoints']} checkpoint(s) in the window); "
        f"CPU µs: workers {cost['worker_cpu_us']:,}, database {cost['database_cpu_us']:,} "
        f"(+ server background {cost['server_background_cpu_us']:,})"
        + ("" if window["settled"] else "; the statistics had not settled")
        + (
            f"; {others:,} transactions in other databases meanwhile"
            if (others := window["other_databases_transactions"])
            else ""
        )
    )
