"""Skills: reusable Markdown procedures in `<home>/skills/` (`<name>.md`, or `<name>/SKILL.md`).

`skills_list` names them with a one-line description (frontmatter `description:` or the first
line of text), `skill_view` reads one, `skill_manage` creates, updates or deletes one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.files import atomic_write
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_NAME_HELP = "lowercase letters, digits, '-' and '_', e.g. 'deploy-website'"
_MAX_CHARS = 100_000


class Skills:
    """The skills directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, name: str) -> Path | None:
        name = check_name(name)
        for candidate in (self.root / name / "SKILL.md", self.root / f"{name}.md"):
            if candidate.is_file():
                return candidate
        return None

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        found = {p.stem for p in self.root.glob("*.md") if NAME.match(p.stem)}
        found |= {p.parent.name for p in self.root.glob("*/SKILL.md") if NAME.match(p.parent.name)}
        return sorted(found)


def check_name(name: str) -> str:
    cleaned = name.strip()
    if not NAME.match(cleaned):
        raise ToolError(f"invalid skill name {name[:70]!r}: use {_NAME_HELP}")
    return cleaned


def describe(text: str) -> str:
    """The frontmatter description, else the first line of prose."""
    lines = text.splitlines()
    body = lines
    if lines and lines[0].strip() == "---":
        for i, line in enumerate(lines[1:], 1):
            if line.strip() == "---":
                body = lines[i + 1 :]
                break
            key, _, value = line.partition(":")
            if key.strip() == "description" and value.strip():
                return value.strip().strip("'\"")[:200]
    for line in body:
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped[:200]
    return "(no description)"


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SkillsListTool(ModelTool):
    name = "skills_list"
    description = (
        "List your saved skills (reusable step-by-step procedures) with a one-line "
        "description each. Read one with skill_view before doing a task it covers."
    )
    parallel_safe = True
    Args = NoArgs

    def __init__(self, skills: Skills) -> None:
        self.skills = skills

    def call(self, args: NoArgs, ctx: ToolContext) -> str:
        lines = []
        for name in self.skills.names():
            path = self.skills.path_of(name)
            if path is not None:
                lines.append(f"- {name}: {describe(path.read_text('utf-8', 'replace')[:4000])}")
        return "\n".join(lines) if lines else "(no skills yet; save one with skill_manage)"


class SkillViewArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The skill's name, as skills_list shows it.", min_length=1)


class SkillViewTool(ModelTool):
    name = "skill_view"
    description = "Read a saved skill in full (its Markdown instructions)."
    parallel_safe = True
    Args = SkillViewArgs

    def __init__(self, skills: Skills) -> None:
        self.skills = skills

    def call(self, args: SkillViewArgs, ctx: ToolContext) -> str:
        path = self.skills.path_of(args.name)
        if path is None:
            known = ", ".join(self.skills.names()) or "none"
            raise ToolError(f"no skill named {args.name.strip()!r} (skills: {known})")
        return path.read_text("utf-8", "replace")[:_MAX_CHARS]


class SkillManageArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["create", "update", "delete"] = Field(
        description="create: a new skill; update: replace an existing skill's text; "
        "delete: remove it."
    )
    name: str = Field(description=f"The skill's name: {_NAME_HELP}.", min_length=1)
    content: str | None = Field(
        None,
        description="The whole Markdown text (create, update). Start with a frontmatter "
        "block '---\\ndescription: one line\\n---' and then numbered steps.",
        max_length=_MAX_CHARS,
    )


class SkillManageTool(ModelTool):
    name = "skill_manage"
    description = (
        "Save a reusable procedure as a skill, rewrite one, or delete one. Save a skill after "
        "working out a multi-step task you are likely to repeat."
    )
    parallel_safe = False
    Args = SkillManageArgs

    def __init__(self, skills: Skills) -> None:
        self.skills = skills

    def call(self, args: SkillManageArgs, ctx: ToolContext) -> str:
        name = check_name(args.name)
        existing = self.skills.path_of(name)
        if args.action == "delete":
            if existing is None:
                raise ToolError(f"no skill named {name!r}")
            existing.unlink()
            return f"Deleted skill {name!r}."
        if not (args.content or "").strip():
            raise ToolError(f"'{args.action}' needs the skill's 'content'")
        if args.action == "create" and existing is not None:
            raise ToolError(f"skill {name!r} exists; use action 'update' to change it")
        if args.action == "update" and existing is None:
            raise ToolError(f"no skill named {name!r}; use action 'create'")
        path = existing or self.skills.root / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (args.content or "").strip() + "\n"
        atomic_write(path, text.encode())
        verb = "Created" if args.action == "create" else "Updated"
        return f"{verb} skill {name!r} ({len(text)} characters)."


def _skills(settings: ToolSettings) -> Skills:
    from tools.catalog import require_home

    return Skills(require_home(settings, "skills") / "skills")


def make_skills_list(settings: ToolSettings) -> SkillsListTool:
    return SkillsListTool(_skills(settings))


def make_skill_view(settings: ToolSettings) -> SkillViewTool:
    return SkillViewTool(_skills(settings))


def make_skill_manage(settings: ToolSettings) -> SkillManageTool:
    return SkillManageTool(_skills(settings))
