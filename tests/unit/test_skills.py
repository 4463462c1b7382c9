"""Agent Skills: parsing and validating SKILL.md, where skills come from, use_skill, and read_file's allowance."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from shou.context.builder import system_text
from shou.errors import ToolError
from shou.skills import (
    MAX_SKILL_BYTES,
    SkillSet,
    load_skills,
    open_user_skill_file,
    parse,
    skills_for,
    validate_description,
    validate_name,
)
from shou.tools.base import ToolContext
from shou.tools.builtin.files import read_file
from shou.trust import TrustStore


def write_skill(folder: Path, name: str | None = None, description: str = "Does a thing.", body: str = "",
                extra: str = "") -> Path:
    """A skill folder `folder` with a SKILL.md (name defaults to the folder's name)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = folder.name if name is None else name
    body = body or f"The {name} instructions, step by step."
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n")
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """The user's skills folder, `<config dir>/skills`."""
    folder = tmp_path / "config" / "skills"
    folder.mkdir(parents=True)
    return folder


def settings_for(ws: Path, user: Path) -> SimpleNamespace:
    return SimpleNamespace(workspace=ws, env={"SHOU_CONFIG_DIR": str(user.parent)})


async def call(tool, ctx: ToolContext | None = None, **args: object):
    return await tool.call(tool.validate(args), ctx)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("name", ["a", "pdf", "pdf-tools", "a1-b2-c3", "x" * 64])
def test_valid_names(name: str) -> None:
    assert validate_name(name, name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("", "no name"), (None, "no name"), (3, "no name"), ("x" * 65, "at most 64"), ("PDF", "a-z, 0-9"),
    ("-pdf", "a-z, 0-9"), ("pdf-", "a-z, 0-9"), ("pdf--tools", "a-z, 0-9"), ("pdf_tools", "a-z, 0-9"),
    ("pdf tools", "a-z, 0-9"), ("pdé", "a-z, 0-9"),
])
def test_invalid_names(name: object, why: str) -> None:
    assert why in (validate_name(name) or "")


def test_name_must_match_its_folder() -> None:
    assert "does not match its folder 'pdf-tools'" in (validate_name("pdf", "pdf-tools") or "")


@pytest.mark.parametrize(("description", "why"), [
    ("", "no description"), ("   ", "no description"), (None, "no description"), (["a"], "no description"),
    ("x" * 1025, "at most 1024"),
])
def test_invalid_descriptions(description: object, why: str) -> None:
    assert why in (validate_description(description) or "")
    assert validate_description("x" * 1024) is None


def test_parse_front_matter_and_body() -> None:
    text = "\ufeff---\r\nname: pdf\r\ndescription: 'Read PDFs: text, tables'\r\n---\r\n\r\n# Use\r\nrun\r\n"
    front, body = parse(text)
    assert front == {"name": "pdf", "description": "Read PDFs: text, tables"}
    assert body == "# Use\nrun"


@pytest.mark.parametrize(("text", "why"), [
    ("# no front matter\n", "does not start with YAML front matter"),
    ("---\nname: pdf\n", "no closing '---'"),
    ("---\nname: pdf\ndescription: use when: x\n---\n", "not valid YAML"),
    ("---\n- a\n- b\n---\n", "not a mapping"),
])
def test_parse_errors(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse(text)


# ---------------------------------------------------------------- loading


def test_workspace_skill_overrides_user_skill_and_both_are_listed(ws: Path, user: Path) -> None:
    write_skill(user / "pdf", description="User PDF skill.")
    write_skill(user / "notes", description="Take notes.")
    write_skill(ws / ".agents" / "skills" / "pdf", description="Workspace PDF skill.")
    found = load_skills(ws, user, trusted=True)
    assert sorted(found.skills) == ["notes", "pdf"]
    assert found.skills["pdf"].source == "workspace" and found.skills["pdf"].description == "Workspace PDF skill."
    assert found.skills["notes"].source == "user"
    statuses = {(e.source, e.name): e.status for e in found.listed}
    assert statuses == {("user", "notes"): "valid", ("workspace", "pdf"): "valid",
                        ("user", "pdf"): "overridden by the workspace skill of the same name"}
    assert found.problems == []


def test_invalid_skills_are_skipped_with_one_warning_each(ws: Path, user: Path) -> None:
    write_skill(user / "good")
    write_skill(user / "Bad-Case")
    write_skill(user / "mismatch", name="other")
    write_skill(user / "empty", description="''")
    write_skill(user / "long", description="x" * 1025)
    write_skill(user / "tools", extra="allowed-tools: {a: 1}\n")
    (user / "no-file").mkdir()
    (user / "binary").mkdir()
    (user / "binary" / "SKILL.md").write_bytes(b"---\nname: binary\ndescription: \xff\n---\n")
    (user / "huge").mkdir()
    (user / "huge" / "SKILL.md").write_text("---\nname: huge\ndescription: big\n---\n" + "x" * MAX_SKILL_BYTES)
    (user / "README.md").write_text("not a skill: files beside the skill folders are left alone\n")
    found = load_skills(None, user, trusted=False)
    assert list(found.skills) == ["good"]
    assert len(found.problems) == 8
    why = {e.name: e.status for e in found.listed if not e.valid}
    assert "a-z, 0-9" in why["Bad-Case"]
    assert "does not match its folder" in why["mismatch"]
    assert "no description" in why["empty"]
    assert "at most 1024" in why["long"]
    assert "allowed-tools" in why["tools"]
    assert "has no SKILL.md" in why["no-file"]
    assert "not UTF-8" in why["binary"]
    assert f"at most {MAX_SKILL_BYTES}" in why["huge"]
    assert all(p.startswith("skill '") and " is skipped: " in p for p in found.problems)


def test_optional_fields_are_kept(user: Path) -> None:
    write_skill(user / "pdf", extra="license: MIT\ncompatibility: needs pdftotext\nmetadata:\n  version: 1.2\n"
                                    "allowed-tools: read_file shell\n")
    skill = load_skills(None, user, trusted=False).skills["pdf"]
    assert (skill.license, skill.compatibility, dict(skill.metadata), skill.allowed_tools) == (
        "MIT", "needs pdftotext", {"version": "1.2"}, ("read_file", "shell"))


def test_an_untrusted_workspace_is_not_read_and_one_warning_says_how_to_trust(ws: Path, user: Path) -> None:
    for name in ("pdf", "deploy"):
        write_skill(ws / ".agents" / "skills" / name)
    write_skill(user / "notes")
    found = load_skills(ws, user, trusted=False)
    assert list(found.skills) == ["notes"]
    assert [e.name for e in found.listed] == ["notes"]  # the workspace's folders were never looked into
    [warning] = found.problems
    assert "not trusted" in warning and "shou trust" in warning and str(ws) in warning
    assert found.notices == found.problems


def test_no_warning_without_workspace_skills(ws: Path, user: Path) -> None:
    assert load_skills(ws, user, trusted=False).problems == []
    assert load_skills(ws, ws / "missing", trusted=True).problems == []


def test_symlinks_are_not_followed(tmp_path: Path, ws: Path, user: Path) -> None:
    elsewhere = write_skill(tmp_path / "elsewhere" / "linked")
    (user / "linked").symlink_to(elsewhere)
    write_skill(user / "file-link")
    (user / "file-link" / "SKILL.md").unlink()
    (user / "file-link" / "SKILL.md").symlink_to(elsewhere / "SKILL.md")
    found = load_skills(None, user, trusted=False)
    assert found.skills == {}
    why = {e.name: e.status for e in found.listed}
    assert "symlink" in why["linked"] and "symlink" in why["file-link"]
    # A workspace whose .agents is a link elsewhere: none of its skills are read, and the person is told.
    write_skill(tmp_path / "other" / "skills" / "pdf")
    (ws / ".agents").symlink_to(tmp_path / "other")
    found = load_skills(ws, None, trusted=True)
    assert found.skills == {} and "symlink" in found.problems[0]


def test_skills_for_trusts_only_an_approved_skill_file(ws: Path, user: Path) -> None:
    folder = write_skill(ws / ".agents" / "skills" / "pdf")
    warnings: list[str] = []
    assert skills_for(settings_for(ws, user), warnings.append) is None  # nothing trusted
    assert len(warnings) == 1 and "shou trust" in warnings[0] and "not trusted" in warnings[0]
    data = b"# trusted\n"
    (ws / "shou.toml").write_bytes(data)
    TrustStore(user.parent).trust(ws / "shou.toml", data)
    warnings.clear()
    assert skills_for(settings_for(ws, user), warnings.append) is None  # trusting the settings is not enough
    assert "not trusted" in warnings[0]
    TrustStore(user.parent).trust(folder / "SKILL.md", (folder / "SKILL.md").read_bytes())
    warnings.clear()
    found = skills_for(settings_for(ws, user), warnings.append)
    assert found is not None and list(found.skills) == ["pdf"] and warnings == []
    write_skill(folder, body="Changed after it was trusted.")
    assert skills_for(settings_for(ws, user), warnings.append) is None
    assert "not trusted" in warnings[0]


def test_skills_for_with_real_settings(ws: Path, user: Path) -> None:
    from shou.config import load_settings

    write_skill(user / "notes")
    settings = load_settings({"workspace": ws}, env={"SHOU_CONFIG_DIR": str(user.parent)})
    found = skills_for(settings, lambda message: None)
    assert found is not None and found.skills["notes"].path == user / "notes"


# ---------------------------------------------------------------- catalog, use_skill, the system prompt


def test_catalog_has_names_and_descriptions_but_no_bodies(user: Path) -> None:
    write_skill(user / "pdf", description="Read PDF\n  files.", body="SECRET-BODY-PDF")
    catalog = load_skills(None, user, trusted=False).catalog()
    assert "- pdf: Read PDF files." in catalog and "use_skill" in catalog
    assert "SECRET-BODY-PDF" not in catalog
    assert SkillSet().catalog() == ""


async def test_use_skill_returns_the_body_and_the_other_files(tmp_path: Path, ws: Path, user: Path) -> None:
    folder = write_skill(ws / ".agents" / "skills" / "pdf", body="BODY-PDF")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "fill.py").write_text("print(1)\n")
    (folder / "reference.md").write_text("ref\n")
    (folder / ".hidden").write_text("x\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    write_skill(user / "notes", body="BODY-NOTES")
    (user / "notes" / "style.md").write_text("style\n")
    found = load_skills(ws, user, trusted=True)
    use_skill = found.tool()
    assert use_skill.name == "use_skill"
    result = await call(use_skill, name="pdf")
    assert result.details == {"skill": {"name": "pdf", "body": "BODY-PDF"}}
    assert result.content.startswith("BODY-PDF")
    listed = [line[2:] for line in result.content.splitlines() if line.startswith("- ")]
    assert listed == [".agents/skills/pdf/reference.md", ".agents/skills/pdf/scripts/fill.py"]
    notes = await call(use_skill, name="notes")
    assert f"- {user / 'notes' / 'style.md'}" in notes.content  # outside the workspace: the absolute path
    with pytest.raises(ToolError, match="no skill named 'nope'; the skills are: notes, pdf"):
        await call(use_skill, name="nope")


def test_system_text_carries_the_catalog_and_the_loaded_skills() -> None:
    text = system_text("Be brief.", skills="## Skills\n- pdf: Read PDFs.", loaded_skills={"pdf": "BODY-PDF"})
    assert "- pdf: Read PDFs." in text
    assert "## Loaded skills" in text and "### pdf\nBODY-PDF" in text
    assert "Loaded skills" not in system_text("Be brief.", skills="## Skills\n- pdf: Read PDFs.")


# ---------------------------------------------------------------- read_file's allowance for user skills


def skill_context(ws: Path, settings: SimpleNamespace) -> ToolContext:
    """The context a run gives its tools (agent/loop.py): read_file may read user skills' files."""
    return ToolContext(workspace=ws, settings=settings, read_outside=partial(open_user_skill_file, settings))


async def test_read_file_reads_a_user_skills_file_and_nothing_else_outside(tmp_path: Path, ws: Path,
                                                                          user: Path) -> None:
    write_skill(user / "notes")
    (user / "notes" / "style.md").write_text("use short lines\n")
    write_skill(user / "Broken")  # not a valid skill: its files are not readable
    (user / "Broken" / "data.md").write_text("broken\n")
    (user / "loose.md").write_text("not in a skill\n")
    (user.parent / "shou.toml").write_text("api_key = 'sk-secret'\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    (user / "notes" / "escape.md").symlink_to(tmp_path / "outside.txt")
    ctx = skill_context(ws, settings_for(ws, user))
    assert await call(read_file, ctx, path=str(user / "notes" / "style.md")) == "use short lines\n"
    assert "name: notes" in await call(read_file, ctx, path=str(user / "notes" / "SKILL.md"))
    refused = [
        tmp_path / "outside.txt",  # outside both
        user.parent / "shou.toml",  # the user's config, beside the skills folder
        user / "loose.md",  # in the skills folder, not in a skill
        user / "Broken" / "data.md",  # in an invalid skill
        user / "notes" / "escape.md",  # a symlink in a skill
        user / "notes",  # a folder
    ]
    for path in refused:
        with pytest.raises(ToolError):
            await call(read_file, ctx, path=str(path))
    with pytest.raises(ToolError, match="outside the workspace"):  # `..` out of a skill is spelled away first
        await call(read_file, ctx, path=f"{user}/notes/../../shou.toml")
    with pytest.raises(ToolError, match="does not exist"):
        await call(read_file, ctx, path=str(user / "notes" / "missing.md"))
    # Without settings there is no user config folder to allow: the workspace rule alone applies.
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(read_file, ToolContext(workspace=ws), path=str(user / "notes" / "style.md"))


async def test_read_file_still_reads_the_workspace_first(ws: Path, user: Path) -> None:
    (ws / "a.txt").write_text("in the workspace\n")
    ctx = skill_context(ws, settings_for(ws, user))
    assert await call(read_file, ctx, path="a.txt") == "in the workspace\n"
    assert await call(read_file, ctx, path=str(ws / "a.txt")) == "in the workspace\n"


def test_read_allowance_follows_the_resolved_spelling(tmp_path: Path, ws: Path) -> None:
    real = tmp_path / "real-config"
    write_skill(real / "skills" / "notes")
    (tmp_path / "cfg-link").symlink_to(real)  # the person's config folder may itself be a link
    from shou.skills import open_user_skill_file

    settings = SimpleNamespace(workspace=ws, env={"SHOU_CONFIG_DIR": str(tmp_path / "cfg-link")})
    for spelled in (tmp_path / "cfg-link" / "skills" / "notes" / "SKILL.md", real / "skills" / "notes" / "SKILL.md"):
        with open_user_skill_file(settings, str(spelled)) as f:
            assert b"name: notes" in f.read(1 << 20)
    assert open_user_skill_file(settings, str(tmp_path / "x")) is None
    assert open_user_skill_file(settings, "relative/path") is None
    assert os.path.realpath(tmp_path / "cfg-link") == str(real)
