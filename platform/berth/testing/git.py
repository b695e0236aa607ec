"""Real git repositories for tests and benchmarks: the ``git`` command with an identity of its own and none of
the user's or the system's configuration, so a commit is made the same way on every machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from berth.config.environment import process_environ

__all__ = ["git", "git_environment"]


def git_environment() -> dict[str, str]:
    """The process environment with a fixed author and committer, and no global or system git configuration."""
    return {
        **process_environ(),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.org",
    }


def git(repo: Path, *args: str, timeout_s: float = 600) -> str:
    """Run ``git -C repo args…`` (raising on failure) and return what it printed, stripped."""
    executable = shutil.which("git")
    if executable is None:
        raise FileNotFoundError("the git command is not installed")
    done = subprocess.run(  # noqa: S603 - an argument list, never a shell
        [executable, "-C", str(repo), *args],
        env=git_environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout_s,
    )
    return done.stdout.strip()
