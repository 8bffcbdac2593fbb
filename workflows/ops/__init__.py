"""Ops tooling: the benchmark (`bench`), the chaos soak (`chaos`), bulk
history for measuring at scale (`seed`), the demo's users and sample plans
(`demo`), and the helpers that start and stop real processes
(`processes`).

May import anything in workflows/; only the management commands (and the
tests) import it.
"""
