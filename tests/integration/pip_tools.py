"""Installing and removing test packages with the venv's own pip (shared by the pip-installed bundle tests)."""

from __future__ import annotations

import subprocess
import sys


def pip(*args: str) -> None:
    """Run ``python -m pip`` quietly; fail the test with pip's output when it fails."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
