"""The installed actions, by name."""

from __future__ import annotations

from workflows.actions.base import Action

_registry: dict[str, Action] = {}


def register(cls: type[Action]) -> type[Action]:
    _registry[cls.name] = cls()
    return cls


def get(name: str) -> Action:
    try:
        return _registry[name]
    except KeyError:
        raise KeyError(f"unknown action {name!r}") from None


def find(name: str) -> Action | None:
    """The action, or None when none of that name is installed (a plan
    recorded before an action was removed)."""
    return _registry.get(name)


def names() -> list[str]:
    return sorted(_registry)
