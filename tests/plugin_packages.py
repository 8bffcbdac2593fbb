"""The plugin distributions under tests/plugins/, built and installed by pip
as a team would install theirs: from source, with no network (no build
isolation, no index), so their entry points are real installed metadata.
"""

from __future__ import annotations

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
    """Install the distribution `tests/plugins/<name>` into this virtualenv,
    or into `target` (a directory to put on PYTHONPATH). It is built from a
    copy: a build writes `build/` and `*.egg-info` into its source tree."""
    source = workdir / name
    shutil.copytree(SOURCES / name, source, dirs_exist_ok=True)
    _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         *(["--target", str(target)] if target else []), str(source))


def uninstall(name: str) -> None:
    _pip("uninstall", "--yes", "--quiet", name)
