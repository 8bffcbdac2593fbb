"""The installed actions, by name, with where each came from.

Discovery (`workflows.actions.plugins`) builds the whole set at start-up and
installs it in one swap. `@register` only declares a class: discovery takes
the declared classes of each plugin module it imports. A class declared by a
module imported after start-up (outside any discovery) is installed at once,
on the same checks.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from workflows.actions.base import Action
from workflows.actions.checks import class_problems

# The distribution that ships the built-in actions.
PROJECT = "durable-console"


@dataclass(frozen=True)
class Source:
    """Where an action came from: an entry point of an installed
    distribution (`distribution` set), a module named in ACTION_MODULES, or
    a module that declared it after start-up (`via` says which)."""

    via: str  # "entry point", "ACTION_MODULES" or "register"
    name: str  # the entry point's name, or the module's import path
    value: str  # what it points at: "package.module" or "package.module:Class"
    distribution: str = ""
    version: str = ""

    @property
    def builtin(self) -> bool:
        return self.distribution == PROJECT

    @property
    def label(self) -> str:
        if self.distribution:
            return f"entry point {self.name!r} ({self.value}) of {self.distribution} {self.version}"
        return f"{self.via} {self.value}"

    def as_json(self) -> dict[str, Any]:
        return {
            "via": self.via,
            "name": self.name,
            "value": self.value,
            "distribution": self.distribution or None,
            "version": self.version or None,
            "builtin": self.builtin,
        }


@dataclass(frozen=True)
class Problem:
    """Why a plugin was left out."""

    source: Source
    message: str

    def __str__(self) -> str:
        return f"action plugin {self.source.label}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"plugin": self.source.as_json(), "problem": self.message}


@dataclass
class Installed:
    actions: dict[str, Action] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


_installed = Installed()
# Every class `@register` has seen, in order, whether installed or not:
# discovery picks a module's classes from here, so a module that was
# already imported (no decorator runs twice) still yields its actions.
_declared: list[type[Action]] = []
_discovering = False


def register(cls: type[Action]) -> type[Action]:
    """Declare an action class. Discovery installs it with its plugin; after
    start-up it is installed at once, and a problem with it is raised."""
    _declared.append(cls)
    if not _discovering:
        problems = class_problems(cls)
        if not problems and cls.name in _installed.actions and type(_installed.actions[cls.name]) is not cls:
            problems.append(f"action {cls.name!r} is already provided by {_installed.sources[cls.name].label}")
        if problems:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}: {'; '.join(problems)}")
        _installed.actions[cls.name] = cls()
        _installed.sources[cls.name] = Source("register", cls.__module__, cls.__module__)
    return cls


def declared_in(module: str) -> list[type[Action]]:
    """The declared classes defined in `module` or its submodules (the latest
    class object of each, should a module have been imported twice)."""
    latest: dict[str, type[Action]] = {}
    for cls in _declared:
        if cls.__module__ == module or cls.__module__.startswith(f"{module}."):
            latest[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(latest.values())


@contextmanager
def discovering():
    """While discovery imports plugins, `@register` only declares."""
    global _discovering
    _discovering = True
    try:
        yield
    finally:
        _discovering = False


def install(installed: Installed) -> Installed:
    """Make `installed` the set every lookup sees; returns the one it replaces."""
    global _installed
    previous, _installed = _installed, installed
    return previous


def current() -> Installed:
    return _installed


def get(name: str) -> Action:
    try:
        return _installed.actions[name]
    except KeyError:
        raise KeyError(f"unknown action {name!r}") from None


def find(name: str) -> Action | None:
    """The action, or None when none of that name is installed (a plan
    recorded before an action was removed)."""
    return _installed.actions.get(name)


def names() -> list[str]:
    return sorted(_installed.actions)


def source(name: str) -> Source:
    return _installed.sources[name]


def problems() -> list[Problem]:
    return list(_installed.problems)
