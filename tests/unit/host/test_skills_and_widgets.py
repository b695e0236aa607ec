"""Skills parse from SKILL.md folders; widgets must have their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth import Skill, Widget
from berth.bundle.skills import SkillError


def write_skill(folder: Path, text: str, **extra: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)
    for name, content in extra.items():
        (folder / name.replace("_", ".")).write_text(content)
    return folder


def test_a_skill_parses_its_front_matter_and_extra_files(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path / "pdf-report",
        "---\nname: pdf-report\ndescription: Build PDF reports.\n  More text.\n---\n# How\nSteps.\n",
        sources_yaml="- {url: 'https://example.org', title: Example}\n",
        tools_yaml="- exec.python\n",
    )
    skill = Skill.from_folder(folder)
    assert (skill.id, skill.description, skill.instructions) == (
        "pdf-report",
        "Build PDF reports. More text.",
        "# How\nSteps.",
    )
    assert skill.sources == [{"url": "https://example.org", "title": "Example"}]
    assert skill.tools == ["exec.python"]
    assert skill.knowledge == []


def test_a_skill_may_point_at_knowledge_spaces(tmp_path: Path) -> None:
    one = Skill.from_folder(write_skill(tmp_path / "a", "---\nname: a\ndescription: d\nknowledge: runbooks\n---\n"))
    two = Skill.from_folder(write_skill(tmp_path / "b", "---\nname: b\ndescription: d\nknowledge: [x, y]\n---\n"))
    assert (one.knowledge, two.knowledge) == (["runbooks"], ["x", "y"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# no front matter\n", "missing front matter"),
        ("---\nname: x\n---\nbody", "needs a one-line 'description'"),
        ("---\nname: Bad Name\ndescription: d\n---\n", "must match"),
        ("---\nname: [unclosed\n---\n", "front matter is not valid YAML"),
        ("---\nname: x\ndescription: d\nknowledge: {a: 1}\n---\n", "'knowledge' must name knowledge spaces"),
    ],
)
def test_a_broken_skill_names_its_file(tmp_path: Path, text: str, message: str) -> None:
    folder = write_skill(tmp_path / "s", text)
    with pytest.raises(SkillError, match=message) as caught:
        Skill.from_folder(folder)
    assert str(folder / "SKILL.md") in str(caught.value)


def test_a_folder_without_skill_md_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="missing"):
        Skill.from_folder(tmp_path)


def test_widget_needs_exactly_one_body_and_an_index(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Widget(alias="w", title="W")
    assert Widget(alias="w", title="W", html="<p>hi</p>").problems() == []
    assert "has no index.html" in Widget(alias="w", title="W", static_dir=tmp_path).problems()[0]
    assert "does not exist" in Widget(alias="w", title="W", static_dir=tmp_path / "nope").problems()[0]
