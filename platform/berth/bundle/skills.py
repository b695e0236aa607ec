"""Skills: folders with a ``SKILL.md`` (front matter ``name`` and ``description``) addressed as ``sk:<id>``.

Only a skill's id and one-line description are in the prompt (the gallery), so a bundle may have tens of
them; ``react.read("sk:<id>")`` loads one. Optional parts: ``sources.yaml`` (rows that join the sources
pool when the skill is read), ``tools.yaml`` (tool ids or patterns the skill may use: reading it admits
them for the rest of the turn even where the agent's own tool list leaves them out) and ``knowledge:`` in
the front matter (the bundle's knowledge spaces the skill searches).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

SKILL_FILE = "SKILL.md"
SKILL_ID_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)


class SkillError(ValueError):
    """A skill folder that cannot be used; the message names the file (and line when known)."""


class Skill(BaseModel):
    """A parsed skill: its id, one-line description, instructions and optional extra files."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=SKILL_ID_PATTERN)
    description: str
    instructions: str
    folder: Path
    sources: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    knowledge: list[str] = Field(default_factory=list)
    """Knowledge spaces of the bundle this skill searches (front matter ``knowledge``)."""

    @classmethod
    def from_folder(cls, folder: Path | str) -> Skill:
        """Parse ``folder/SKILL.md`` (and ``sources.yaml``/``tools.yaml`` when present)."""
        folder = Path(folder)
        skill_file = folder / SKILL_FILE
        if not skill_file.is_file():
            raise SkillError(f"{skill_file}: missing (a skill folder needs a {SKILL_FILE})")
        text = skill_file.read_text(encoding="utf-8")
        match = _FRONT_MATTER.match(text)
        if match is None:
            raise SkillError(f"{skill_file}:1: missing front matter (--- name: …, description: … ---)")
        try:
            meta = yaml.safe_load(match.group(1)) or {}
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", 0) + 2
            raise SkillError(f"{skill_file}:{line}: front matter is not valid YAML") from None
        if not isinstance(meta, dict):
            raise SkillError(f"{skill_file}:2: front matter must be a mapping")
        skill_id = str(meta.get("name") or folder.name)
        if not re.fullmatch(SKILL_ID_PATTERN, skill_id):
            raise SkillError(f"{skill_file}:2: skill name '{skill_id}' must match {SKILL_ID_PATTERN}")
        description = str(meta.get("description") or "").strip()
        if not description:
            raise SkillError(f"{skill_file}:2: front matter needs a one-line 'description'")
        knowledge = meta.get("knowledge") or []
        if isinstance(knowledge, str):
            knowledge = [knowledge]
        if not isinstance(knowledge, list) or not all(isinstance(space, str) for space in knowledge):
            raise SkillError(f"{skill_file}:2: 'knowledge' must name knowledge spaces (a name or a list of names)")
        return cls(
            id=skill_id,
            knowledge=knowledge,
            description=description.splitlines()[0],
            instructions=text[match.end() :].strip(),
            folder=folder,
            sources=_yaml_list(folder / "sources.yaml"),
            tools=[str(item) for item in _yaml_list(folder / "tools.yaml")],
        )


def _yaml_list(path: Path) -> list[Any]:
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise SkillError(f"{path}: not valid YAML") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise SkillError(f"{path}: expected a list")
    return data
