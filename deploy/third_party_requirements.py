"""The third-party requirements of the image's projects: every ``[project].dependencies`` entry of the given project
folders whose name is not one of those projects, one per line (markers and extras kept), sorted.

    python3 deploy/third_party_requirements.py ./exec . ./plugins/postgres ... > third-party.txt

deploy/Dockerfile installs these (under the pinned lock) in a layer of their own before it copies any source, so a
change to the repository's code reuses that layer; standard library only (it runs on the bare base image).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """The distribution name a requirement string starts with."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def third_party_requirements(folders: list[Path]) -> list[str]:
    """The dependencies of the projects in ``folders`` that none of them provides."""
    projects = [tomllib.loads((folder / "pyproject.toml").read_text())["project"] for folder in folders]
    own = {canonical(project["name"]) for project in projects}
    wanted = {
        requirement.strip()
        for project in projects
        for requirement in project.get("dependencies", [])
        if requirement_name(requirement) not in own
    }
    return sorted(wanted, key=str.lower)


if __name__ == "__main__":
    sys.stdout.write("".join(f"{line}\n" for line in third_party_requirements([Path(arg) for arg in sys.argv[1:]])))
