"""Real SQLMesh for the differential tests: a venv of its own (``tests/.sqlmesh-venv``, git-ignored), never our
environment; rows of both sides as text they agree on."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

VENV = Path(__file__).parent / ".sqlmesh-venv"
SQLMESH_VERSION = "0.236.4"
REQUIREMENTS = [f"sqlmesh=={SQLMESH_VERSION}"]
INSTALL_LOCK = Path(__file__).parent / ".install.lock"


_held = []  # this process's open lock file while it holds the lock (re-entered by nested installs)


@contextlib.contextmanager
def installing():
    """Held while a test installs or downloads anything shared (a venv, a package, a source distribution), so
    that test processes running side by side (``pytest -n``) never install the same thing at once."""
    if _held:
        yield
        return
    with open(INSTALL_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _held.append(handle)
        try:
            yield
        finally:
            _held.clear()
            fcntl.flock(handle, fcntl.LOCK_UN)


def sqlmesh_python(*extra: str, probe: str = "") -> Path:
    """The venv's Python, created with SQLMesh on first use; ``extra`` requirements installed when ``probe`` (a
    Python statement) fails in it, with SQLMesh and DuckDB held at their installed versions. Skips the test when
    the package index cannot be reached."""
    python = VENV / "bin" / "python"
    with installing():
        if not (VENV / "bin" / "sqlmesh").exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            _pip_install(python, REQUIREMENTS)
        if extra and subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
            held = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
            kept = ("sqlmesh==", "duckdb==", "sqlglot==")
            pins = [line for line in held.stdout.splitlines() if line.lower().startswith(kept)]
            constraints = VENV / "constraints.txt"
            constraints.write_text("\n".join(pins) + "\n")
            _pip_install(python, ["-c", str(constraints), *extra])
    return python


def _pip_install(python: Path, args: list[str]) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot install {args}: {done.stderr.strip().splitlines()[-1:]}")


def plain(value) -> str:
    """One cell as text both sides agree on: dates as ISO days, timestamps as ISO text, numbers rounded."""
    if isinstance(value, (datetime, date)):
        return (
            value.isoformat()[:10]
            if isinstance(value, date) and not isinstance(value, datetime)
            else value.isoformat(sep=" ")
        )
    if isinstance(value, (float, Decimal)) or isinstance(value, int) and not isinstance(value, bool):
        return repr(round(float(value), 6))
    return str(value)


def text_rows(rows) -> list[tuple[str, ...]]:
    return sorted(tuple(plain(v) for v in row) for row in rows)
