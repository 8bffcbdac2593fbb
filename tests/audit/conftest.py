"""The audit wing's fixtures."""

import pytest

from workflows.audit import secrets


@pytest.fixture
def fresh_secret_registry(monkeypatch):
    """Each test starts with a worker-side registry that resolved nothing."""
    monkeypatch.setattr(secrets, "_resolved", {})
    monkeypatch.setattr(secrets, "_preloaded", False)
