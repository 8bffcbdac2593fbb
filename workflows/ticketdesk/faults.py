"""Fault injection: parsing a fault spec, and the in-memory list of active faults."""

from __future__ import annotations

import itertools
import threading

from workflows.ticketdesk.errors import DeskError

ANSWERING_MODES = ("error", "rate_limit", "commit_then_drop")
FAULT_FIELDS = {
    "error": {"mode", "status", "count"},
    "rate_limit": {"mode", "retry_after", "count"},
    "latency": {"mode", "ms", "count"},
    "commit_then_drop": {"mode", "count"},
    "ignore_idempotency": {"mode", "count"},
}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_fault(spec) -> dict:
    """Validate a fault spec and return it normalised (raises DeskError 400).

    ``count`` defaults to 1 for error, rate_limit and commit_then_drop.
    latency and ignore_idempotency last until cleared unless a count is given.
    """

    def bad(message: str) -> DeskError:
        return DeskError(400, "invalid_fault", message)

    if not isinstance(spec, dict):
        raise bad("a fault must be a JSON object")
    mode = spec.get("mode")
    if mode not in FAULT_FIELDS:
        raise bad(f"mode must be one of {', '.join(sorted(FAULT_FIELDS))}")
    unknown = set(spec) - FAULT_FIELDS[mode]
    if unknown:
        raise bad(f"unknown field(s) for mode {mode}: {', '.join(sorted(unknown))}")

    fault: dict = {"mode": mode}
    if "count" in spec:
        count = spec["count"]
        if not _is_int(count) or count < 1:
            raise bad("count must be a positive integer")
        fault["count"] = count
    elif mode in ANSWERING_MODES:
        fault["count"] = 1

    if mode == "error":
        status = spec.get("status", 503)
        if not _is_int(status) or not 400 <= status <= 599:
            raise bad("status must be an integer from 400 to 599")
        fault["status"] = status
    elif mode == "rate_limit":
        retry_after = spec.get("retry_after", 1)
        if not _is_number(retry_after) or retry_after < 0:
            raise bad("retry_after must be a non-negative number of seconds")
        fault["retry_after"] = retry_after
    elif mode == "latency":
        if "ms" not in spec:
            raise bad("latency needs ms")
        ms = spec["ms"]
        if not _is_number(ms) or ms < 0 or ms > 600_000:
            raise bad("ms must be a number from 0 to 600000")
        fault["ms"] = ms
    return fault


class Faults:
    """The in-memory list of active faults (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults: list[dict] = []
        self._ids = itertools.count(1)

    def add(self, fault: dict) -> dict:
        with self._lock:
            fault = {"id": next(self._ids), **fault}
            self._faults.append(fault)
            return dict(fault)

    def list(self) -> list[dict]:
        with self._lock:
            return [dict(f) for f in self._faults]

    def clear(self) -> int:
        with self._lock:
            n = len(self._faults)
            self._faults.clear()
            return n

    def remove(self, fault_id: int) -> bool:
        with self._lock:
            before = len(self._faults)
            self._faults = [f for f in self._faults if f["id"] != fault_id]
            return len(self._faults) != before

    def _use(self, fault: dict) -> None:
        # Caller holds the lock.  Faults without a count never run out.
        if "count" in fault:
            fault["count"] -= 1
            if fault["count"] <= 0:
                self._faults.remove(fault)

    def latency_ms(self) -> float:
        with self._lock:
            total = 0.0
            for fault in [f for f in self._faults if f["mode"] == "latency"]:
                total += fault["ms"]
                self._use(fault)
            return total

    def take_answering(self) -> dict | None:
        """The oldest error/rate_limit/commit_then_drop fault, used once."""
        with self._lock:
            for fault in self._faults:
                if fault["mode"] in ANSWERING_MODES:
                    taken = dict(fault)
                    self._use(fault)
                    return taken
            return None

    def take_ignore_idempotency(self) -> bool:
        with self._lock:
            for fault in self._faults:
                if fault["mode"] == "ignore_idempotency":
                    self._use(fault)
                    return True
            return False
