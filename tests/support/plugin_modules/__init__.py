"""Modules named in ACTION_MODULES by the plugin tests: one sound, the
others each wrong in one way."""
