"""Every ``pip install`` that the README and the docs show names files, paths, projects and extras that exist."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PIP_INSTALL = re.compile(r"pip install\s+(?P<args>[^`\n]*(?:\\\n[^`\n]*)*)")
OPTIONS_WITH_A_VALUE = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url"}
SCAFFOLDED = re.compile(r"berth bundles new (?P<name>[\w-]+)")
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extras>[^\]]*)\])?")


def documents() -> list[Path]:
    found = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "exec" / "README.md"]
    found += sorted((REPO_ROOT / "plugins").glob("*/README.md")) + sorted((REPO_ROOT / "bundles").glob("*/README.md"))
    return [path for path in found if path.is_file()]


def local_projects() -> dict[str, tuple[Path, set[str]]]:
    """Each pip project in the repository by name: its folder and its extras."""
    projects = {}
    for pyproject in [
        REPO_ROOT / "pyproject.toml",
        *REPO_ROOT.glob("*/*/pyproject.toml"),
        REPO_ROOT / "exec" / "pyproject.toml",
    ]:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if "name" in project:
            projects[project["name"]] = (pyproject.parent, set(project.get("optional-dependencies", {})))
    return projects


def pip_install_arguments(text: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` in ``text`` (up to ``&&``, ``;``, ``|`` or a comment)."""
    commands = []
    for match in PIP_INSTALL.finditer(text):
        words = shlex.split(match["args"].replace("\\\n", " "), comments=True)
        cut = next((i for i, word in enumerate(words) if word in {"&&", ";", "|", "||"}), len(words))
        commands.append(words[:cut])
    return commands


def problems_of(
    arguments: list[str],
    base: Path,
    projects: dict[str, tuple[Path, set[str]]],
    scaffolded: frozenset[str] = frozenset(),
) -> list[str]:
    """What in one ``pip install`` (or requirements file) does not exist, relative to ``base`` for files.

    ``scaffolded`` names projects the document itself creates first (``berth bundles new NAME``).
    """
    problems: list[str] = []
    words = iter(arguments)
    for word in words:
        if word in OPTIONS_WITH_A_VALUE:
            value = next(words, "")
            if word in {"-i", "--index-url"}:
                continue
            if word in {"-e", "--editable"}:
                if value.partition("[")[0] not in scaffolded:
                    problems += check_path_requirement(value, REPO_ROOT, projects)
            else:
                problems += check_requirements_file(base / value, projects)
        elif word.startswith("-"):
            continue
        elif word.startswith((".", "/")) or "/" in word.partition("[")[0]:
            problems += check_path_requirement(word, REPO_ROOT, projects)
        else:
            problems += check_named_requirement(word, projects)
    return problems


def check_path_requirement(word: str, base: Path, projects: dict[str, tuple[Path, set[str]]]) -> list[str]:
    path_text, _, extras = word.partition("[")
    folder = (base / path_text).resolve()
    if not (folder / "pyproject.toml").is_file():
        return [f"{word}: no pip project at {folder}"]
    known = next((extras_of for folder_of, extras_of in projects.values() if folder_of.resolve() == folder), set())
    wanted = {extra.strip() for extra in extras.rstrip("]").split(",") if extra.strip()}
    return [f"{word}: unknown extra {extra!r}" for extra in sorted(wanted - known)]


def check_named_requirement(word: str, projects: dict[str, tuple[Path, set[str]]]) -> list[str]:
    match = REQUIREMENT.match(word)
    if match is None or not match["name"].startswith("berth"):
        return []  # a third-party package: PyPI's business
    name = match["name"]
    if name not in projects:
        return [f"{word}: no project named {name!r} in the repository"]
    wanted = {extra.strip() for extra in (match["extras"] or "").split(",") if extra.strip()}
    return [f"{word}: unknown extra {extra!r}" for extra in sorted(wanted - projects[name][1])]


def check_requirements_file(path: Path, projects: dict[str, tuple[Path, set[str]]]) -> list[str]:
    if not path.is_file():
        return [f"{path}: no such requirements file"]
    problems = []
    for line in path.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        # inside a requirements file, -r/-c are relative to the file; -e paths to the working directory (the root)
        problems += problems_of(words, path.parent, projects)
    return problems


def test_the_docs_show_pip_installs_to_check() -> None:
    commands = [args for document in documents() for args in pip_install_arguments(document.read_text("utf-8"))]
    assert ["-r", "requirements/dev.txt"] in commands


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_pip_install_names_what_exists(document: Path) -> None:
    projects = local_projects()
    text = document.read_text(encoding="utf-8")
    scaffolded = frozenset(match["name"] for match in SCAFFOLDED.finditer(text))
    problems = [
        f"{document.name}: pip install {' '.join(args)}: {problem}"
        for args in pip_install_arguments(text)
        for problem in problems_of(args, REPO_ROOT, projects, scaffolded)
    ]
    assert problems == []


def test_a_wrong_path_extra_or_file_is_found(tmp_path: Path) -> None:
    projects = local_projects()
    assert problems_of(["-e", "plugins/nope"], REPO_ROOT, projects)
    assert problems_of(["berth-platform[embeddings]"], REPO_ROOT, projects)
    assert problems_of(["-r", "requirements/missing.txt"], REPO_ROOT, projects)
    assert problems_of(["-e", "my-agent"], REPO_ROOT, projects)
    assert problems_of(["-e", "my-agent"], REPO_ROOT, projects, frozenset({"my-agent"})) == []
    assert problems_of(["berth-aws", "-e", "plugins/aws[test]", "httpx>=0.27"], REPO_ROOT, projects) == []
