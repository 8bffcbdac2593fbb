"""Discovery: the actions of installed packages and of ACTION_MODULES.

A plugin is one entry point of the group `durableconsole.actions` (naming a
module, whose `@register` classes it installs, or one Action class) or one
import path of ACTION_MODULES. The built-ins are entry points of this
project's own distribution. Plugins load in a fixed order, so that the same
installation always resolves a name the same way: the built-ins, then the
other entry points by distribution and entry point name, then ACTION_MODULES
as listed; a name taken by an earlier plugin stays with it.

A plugin is installed whole or not at all: one bad class leaves out its
siblings too, since a half-installed plugin (a refund without the action
that undoes it) is worse than a missing one. A plugin whose `compensation`
names an action no accepted plugin provides is left out as well, until
nothing changes.

With ACTION_PLUGINS_STRICT (the default) any problem stops start-up,
naming the plugin and the problem; without it the bad plugins are left
out, the others load, and the problems are logged and kept for the
operators' page.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from workflows.actions import registry
from workflows.actions.base import Action
from workflows.actions.checks import class_problems, compensation_problems
from workflows.actions.registry import PROJECT, Installed, Problem, Source

GROUP = "durableconsole.actions"

log = logging.getLogger(__name__)


def discover(modules: list[str] | None = None, strict: bool | None = None) -> Installed:
    """Find, check and install every plugin's actions; returns what was
    installed. Raises ImproperlyConfigured when this project itself is not
    installed (or its metadata is stale), and, when strict, on any problem."""
    modules = settings.ACTION_MODULES if modules is None else modules
    strict = settings.ACTION_PLUGINS_STRICT if strict is None else strict
    check_install(Path(settings.BASE_DIR) / "pyproject.toml")
    plugins = _entry_point_plugins() + [_module_plugin(path) for path in modules]
    installed = Installed()
    provided: list[tuple[Source, list[str]]] = []
    with registry.discovering():
        for source, load in plugins:
            names, message = _load(source, load, installed)
            if message:
                installed.problems.append(Problem(source, message))
            else:
                provided.append((source, names))
    _leave_out_uncompensable(installed, provided)
    if installed.problems:
        if strict:
            listed = "\n".join(f"  - {problem}" for problem in installed.problems)
            raise ImproperlyConfigured(
                f"Action plugins failed to load (ACTION_PLUGINS_STRICT=0 starts without "
                f"them, and shows them on the operators' page):\n{listed}"
            )
        for problem in installed.problems:
            log.warning("left out %s", problem)
    registry.install(installed)
    return installed


def builtins() -> Installed:
    """This project's own actions alone, whatever else is installed, without
    installing them: what the generated references describe."""
    installed = Installed()
    with registry.discovering():
        for source, load in _entry_point_plugins():
            if source.builtin:
                message = _load(source, load, installed)[1]
                if message:
                    raise ImproperlyConfigured(f"built-in {source.label}: {message}")
    return installed


def _entry_point_plugins() -> list[tuple[Source, Callable[[], list]]]:
    found = []
    for entry_point in importlib.metadata.entry_points(group=GROUP):
        dist = entry_point.dist
        source = Source(
            "entry point",
            entry_point.name,
            entry_point.value,
            dist.name if dist else "?",
            dist.version if dist else "?",
        )
        found.append((source, lambda entry_point=entry_point: _classes(entry_point)))
    found.sort(key=lambda plugin: (not plugin[0].builtin, plugin[0].distribution.lower(), plugin[0].name))
    return found


def _module_plugin(path: str) -> tuple[Source, Callable[[], list]]:
    entry_point = importlib.metadata.EntryPoint(name=path, value=path, group=GROUP)
    return Source("ACTION_MODULES", path, path), lambda: _classes(entry_point)


def _classes(entry_point: importlib.metadata.EntryPoint) -> list:
    """What an entry point provides: the class it names, or every class
    that `@register` declared in the module it names (or its submodules)."""
    if entry_point.attr:
        return [entry_point.load()]
    importlib.import_module(entry_point.module)
    return registry.declared_in(entry_point.module)


def _load(source: Source, load: Callable[[], list], installed: Installed) -> tuple[list[str], str]:
    """Import one plugin and check its classes; on success add its actions
    to `installed`. Returns the names it added, or the problem."""
    try:
        classes = load()
    except Exception as exc:
        return [], f"cannot be imported: {_describe(exc)}"
    if not classes:
        return [], (
            "declares no action: decorate its Action classes with @register "
            "(only classes defined in the module it names, or its submodules, count)"
        )
    problems = [problem for cls in classes for problem in class_problems(cls)]
    if problems:
        whole = f" (so none of its {len(classes)} actions is installed)" if len(classes) > 1 else ""
        return [], "; ".join(problems) + whole
    actions: dict[str, Action] = {}
    for cls in classes:
        if cls.name in actions:
            problems.append(f"declares the action {cls.name!r} twice")
        elif cls.name in installed.actions:
            problems.append(f"action {cls.name!r} is already provided by {installed.sources[cls.name].label}")
        actions[cls.name] = cls()
    if problems:
        return [], "; ".join(problems)
    installed.actions.update(actions)
    installed.sources.update(dict.fromkeys(actions, source))
    return list(actions), ""


def _leave_out_uncompensable(installed: Installed, provided: list[tuple[Source, list[str]]]) -> None:
    """Leave out each plugin with an action whose compensation is not
    installed; that may orphan another plugin's compensation, so repeat."""
    while True:
        names = set(installed.actions)
        failing = []
        for source, plugin_names in provided:
            problems = [
                problem for name in plugin_names for problem in compensation_problems(installed.actions[name], names)
            ]
            if problems:
                failing.append((source, plugin_names, problems))
        if not failing:
            return
        for source, plugin_names, problems in failing:
            provided.remove((source, plugin_names))
            for name in plugin_names:
                del installed.actions[name]
                del installed.sources[name]
            installed.problems.append(Problem(source, "; ".join(problems)))


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)
    place = f" (at {where[-1].filename}:{where[-1].lineno})" if where and not isinstance(exc, ImportError) else ""
    return f"{type(exc).__name__}: {exc}{place}"


def check_install(pyproject: Path) -> None:
    """The built-ins are entry points of this project's distribution: without
    it installed (or with metadata older than pyproject.toml), discovery would
    quietly find no built-in actions. Say so instead."""
    try:
        dist = importlib.metadata.distribution(PROJECT)
    except importlib.metadata.PackageNotFoundError:
        raise ImproperlyConfigured(
            f"{PROJECT} is not installed in this Python environment ({sys.prefix}), so its built-in actions "
            f"(entry points of the group {GROUP!r}) cannot be found: run `make setup`, or "
            f"`pip install -e .` in {pyproject.parent}"
        ) from None
    if not pyproject.is_file():
        return
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    if project.get("name") != PROJECT:
        return
    declared = project.get("entry-points", {}).get(GROUP, {})
    recorded = {entry_point.name: entry_point.value for entry_point in dist.entry_points.select(group=GROUP)}
    if declared != recorded:
        raise ImproperlyConfigured(
            f"The installed metadata of {PROJECT} (at {dist.locate_file('')}) is out of date: pyproject.toml "
            f"declares the entry points {declared} of the group {GROUP!r}, the installed metadata has {recorded}. "
            f"Run `make setup`, or `pip install -e .` in {pyproject.parent}"
        )
