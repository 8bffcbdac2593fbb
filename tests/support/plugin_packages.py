"""The plugin distributions under tests/support/plugins/, built and installed by pip
as a team would install theirs: from source, with no network (no build
isolation, no index), so their entry points are real installed metadata.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "plugins"


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise AssertionError(f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def install(name: str, workdir: Path, *, target: Path | None = None) -> None:
    """Install the distribution `tests/support/plugins/<name>` into this virtualenv,
    or into `target` (a directory to put on PYTHONPATH). It is built from a
    copy: a build writes `build/` and `*.egg-info` into its source tree."""
    source = workdir / name
    shutil.copytree(SOURCES / name, source, dirs_exist_ok=True)
    _pip(
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "--quiet",
        *(["--target", str(target)] if target else []),
        str(source),
    )


def uninstall(name: str) -> None:
    _pip("uninstall", "--yes", "--quiet", name)


@contextlib.contextmanager
def installed_for_this_session(name: str, workdir: Path):
    """Install `name` into this virtualenv while this test session needs it.
    `make test` runs its legs side by side on one virtualenv, each in more
    than one process: the sessions share the install, and the last one to
    finish removes it.
    The sessions using it are kept by pid beside the virtualenv, under a
    file lock, so a session that was killed does not keep it forever."""
    registry = Path(sys.prefix) / f".{name}.sessions"

    def update(change) -> list[int]:
        with open(registry.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            users = json.loads(registry.read_text()) if registry.exists() else []
            users = [pid for pid in users if _alive(pid)]
            before = list(users)
            users = change(users)
            if not before and users:
                install(name, workdir)
            elif before and not users:
                uninstall(name)
            registry.write_text(json.dumps(users))
            return users

    me = os.getpid()
    update(lambda users: [*users, me])
    try:
        yield
    finally:
        update(lambda users: [pid for pid in users if pid != me])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
