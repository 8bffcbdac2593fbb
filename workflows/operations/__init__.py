"""The operations people (and agents) perform, one module of plain
functions each: submitting plans (`plans`), deciding on them
(`approvals`), compensation, dead letters and replay, resolution of
in-doubt steps, reviewer notifications, API tokens.

Each operation checks who may do it, validates its input, changes the rows
in one transaction through `engine.transitions` and writes the audit event;
wake-ups for the workers go through `queue`. May import the engine,
actions, audit and the models; never web or ops.
"""
