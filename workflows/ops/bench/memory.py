"""(f) The RSS of every process of the clusters that run (b), sampled from
/proc a few times a second, and whether a worker's memory grows with the
steps it runs; (g) also the CPU each kind of process spends per step."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from workflows.ops.bench.common import BenchError
from workflows.ops.processes import group_pids

MIB = 1024


def _proc(pid: int) -> tuple[int, int] | None:
    """(parent pid, RSS in KiB) from /proc; None once the process is gone."""
    try:
        lines = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except (OSError, ValueError):
        return None
    rss = lines.get("VmRSS", "0 kB").split()[0]
    return int(lines["PPid"]), int(rss)


def _cpu_ticks(pid: int) -> int | None:
    """CPU time of a process and of the children it has reaped (a cluster's
    recycled workers), in clock ticks."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return sum(int(value) for value in fields[11:15])


def _host_busy_ticks() -> int:
    """Every CPU's non-idle time, in clock ticks (/proc/stat)."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4]


class RssSampler(threading.Thread):
    """The RSS of each process of the given clusters, from /proc, a few times a second."""

    def __init__(self, clusters, interval: float = 0.25, others: dict[str, int] | None = None):
        super().__init__(name="bench-rss", daemon=True)
        self.groups = {cluster.process.pid: cluster.name for cluster in clusters}
        self.interval = interval
        self.samples: list[dict[int, int]] = []  # {pid: KiB}
        # With each sample: when, the CPU ticks of every process of the
        # clusters and of `others` (name: pid), and the host's busy ticks.
        self.others = others or {}
        self.times: list[float] = []
        self.cpu: list[dict] = []
        self.host: list[int] = []
        self.parents: dict[int, tuple[int, int]] = {}  # pid -> (process group, parent pid)
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            sample, cpu = {}, {}
            for pgid in self.groups:
                for pid in group_pids(pgid):
                    info = _proc(pid)
                    if info and info[1]:
                        sample[pid] = info[1]
                        self.parents[pid] = (pgid, info[0])
                        cpu[pid] = _cpu_ticks(pid)
            for name, pid in self.others.items():
                cpu[name] = _cpu_ticks(pid)
            self.times.append(time.time())
            self.host.append(_host_busy_ticks())
            self.cpu.append(cpu)
            self.samples.append(sample)
            if self.stopped.wait(self.interval):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join()

    def cpu_per_step(self, steps_by_pid: dict[int, int], started: list[float]) -> dict | None:
        """CPU milliseconds per step of the workers, the clusters' other
        processes, each of `others` and the whole host, between the first
        and last samples taken within the middle 80% of the run (by when
        each step's attempt started, `started`: epoch seconds), so that
        start-up (imports) and the last stragglers are not counted. None if
        the run was too short for two such samples."""
        started = sorted(started)
        if len(started) < 20 or len(self.times) < 3:
            return None
        low, high = started[len(started) // 10], started[len(started) * 9 // 10]
        first = next((i for i, t in enumerate(self.times) if t >= low), None)
        last = next((i for i in range(len(self.times) - 1, -1, -1) if self.times[i] <= high), None)
        if first is None or last is None or last <= first:
            return None
        begin, end = self.times[first], self.times[last]
        steps = sum(1 for t in started if begin < t <= end)
        if not steps:
            return None
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        spent: dict[str, float] = {}
        for key, ticks in self.cpu[last].items():
            if ticks is None:
                continue
            before = self.cpu[first].get(key) or 0
            role = key if isinstance(key, str) else "workers" if key in steps_by_pid else "cluster_other"
            spent[role] = spent.get(role, 0.0) + (ticks - before) * tick_ms
        spent["host"] = (self.host[last] - self.host[first]) * tick_ms
        return {
            "steps": steps,
            "seconds": round(end - begin, 2),
            **{role: round(ms / steps, 2) for role, ms in sorted(spent.items())},
        }

    def summary(self, steps_by_pid: dict[int, int]) -> dict:
        """First, peak and last RSS per process; workers are the processes that
        recorded attempts. A worker's growth is its last RSS against its RSS a
        fifth into its life (start-up and first-use caches behind it), per
        step it ran meanwhile; the run's is that of the worker that grew the
        most, among those that ran 1,000 steps or more when there are any:
        django-q replaces a worker after Q_RECYCLE tasks, and a fresh one is
        still warming up. The worst worker, not the average: one leaking
        worker among steady ones is still a leak."""
        roles = {
            pid: "main"
            if pid == pgid
            else "sentinel"
            if ppid == pgid
            else "worker"
            if pid in steps_by_pid
            else "pusher/monitor"
            for pid, (pgid, ppid) in self.parents.items()
        }
        series: dict[int, list[int]] = {}
        for sample in self.samples:
            for pid, rss in sample.items():
                series.setdefault(pid, []).append(rss)
        processes = []
        for pid, rss in series.items():
            process = {
                "pid": pid,
                "cluster": self.groups[self.parents[pid][0]],
                "role": roles[pid],
                "steps": steps_by_pid.get(pid, 0),
                "samples": len(rss),
                "first_mib": round(rss[0] / MIB, 1),
                "peak_mib": round(max(rss) / MIB, 1),
                "last_mib": round(rss[-1] / MIB, 1),
            }
            if roles[pid] == "worker" and len(rss) >= 5:
                grown = (rss[-1] - rss[len(rss) // 5]) / MIB
                steps = process["steps"] * 0.8  # a worker's steps spread over its life
                process["growth_after_warmup_mib"] = round(grown, 2)
                process["growth_mib_per_10k_steps"] = round(grown / max(steps, 1) * 10_000, 3)
            processes.append(process)
        workers = [p for p in processes if p["role"] == "worker"]
        if not workers:
            raise BenchError("no worker process was sampled")
        measured = [p for p in workers if "growth_after_warmup_mib" in p]
        measured = [p for p in measured if p["steps"] >= 1000] or measured

        def stats(group):
            return {
                "start": max(p["first_mib"] for p in group),
                "peak": max(p["peak_mib"] for p in group),
                "end": max(p["last_mib"] for p in group),
            }

        return {
            "samples": len(self.samples),
            "interval_s": self.interval,
            "worker_processes": len(workers),
            "worker_rss_mib": stats(workers),
            "main_rss_mib": stats([p for p in processes if p["role"] == "main"]),
            "worker_rss_mib_by_tenth": self._by_tenth({p["pid"] for p in workers}),
            "growth_mib_per_10k_steps": max((p["growth_mib_per_10k_steps"] for p in measured), default=0.0),
            "processes": processes,
        }

    def _by_tenth(self, pids: set[int]) -> list[float | None]:
        """The largest worker RSS at the start, at each tenth of the run and
        at its end: flat after the first tenth is what no growth looks like."""
        last = len(self.samples) - 1
        timeline = []
        for tenth in range(11):
            sample = self.samples[round(tenth * last / 10)]
            values = [rss for pid, rss in sample.items() if pid in pids]
            timeline.append(round(max(values) / MIB, 1) if values else None)
        return timeline
