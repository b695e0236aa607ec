"""Installing test packages with the venv's own pip (shared by the pip-installed bundle tests).

A test that ``pip install -e``'s a bundle installs it into a venv of its own, :func:`overlay_venv`, layered on the
one running the tests: the project's venv itself is never changed, so tests running at the same time (pytest-xdist
workers, another checkout's run on the same venv) never see the test's bundle among the installed ones.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def pip(*args: str, python: Path | None = None) -> None:
    """Run ``python -m pip`` quietly (into the venv of ``python`` when given, else this one); fail the test with
    pip's output when it fails."""
    into = ["--python", str(python)] if python is not None else []
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", *into, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


def overlay_venv(folder: Path) -> Path:
    """A venv in ``folder`` that sees everything installed in this one (its ``site-packages`` comes first, then
    this venv's, ``.pth`` files and editable installs included), with a ``bin/berth`` like this venv's; returns its
    ``bin`` folder. What :func:`pip` installs into it (``python=<bin>/python``) is seen only by its interpreter."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = sysconfig.get_paths()["purelib"]
    (Path(own) / "_parent_venv.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    berth = folder / "bin" / "berth"
    berth.write_text(
        f"#!{python}\nimport sys\nfrom berth.cli import main\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    )
    berth.chmod(0o755)
    return folder / "bin"
