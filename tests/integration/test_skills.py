"""Agent Skills through the real HTTP client and the `shou` command: the body loaded only on demand, kept
past compaction, invalid skills skipped with a warning, untrusted workspaces' skills never loaded."""

from __future__ import annotations

import json
from pathlib import Path

from shou import Agent, SQLiteStore
from shou.models.openai_compat import OpenAICompatible
from shou.models.runtime import RetryPolicy
from shou.skills import load_skills

from .conftest import tool_messages

BODY = "PDF-SKILL-BODY: always run pdftotext -layout first."


def model_for(srv) -> OpenAICompatible:
    return OpenAICompatible("m", base_url=srv.base_url, retry=RetryPolicy(max_retries=1, base=0.01))


def write_skill(folder: Path, description: str = "Extract text and tables from PDF files.", body: str = BODY,
                name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name or folder.name}\ndescription: {description}\n---\n{body}\n")
    return folder


def use_skill(name: str, call_id: str = "s1") -> dict:
    return {"tool_calls": [{"name": "use_skill", "arguments": {"name": name}, "id": call_id}]}


def system(request: dict) -> str:
    return request["messages"][0]["content"]


def tool_names(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or ()}


async def test_the_body_arrives_only_after_use_skill_and_survives_compaction(serve, workspace: Path,
                                                                            tmp_path: Path) -> None:
    folder = write_skill(workspace / ".agents" / "skills" / "pdf")
    (folder / "forms.md").write_text("how to fill forms\n")
    skills = load_skills(workspace, tmp_path / "no-user-skills", trusted=True)
    srv = serve([
        use_skill("pdf"),
        {"text": "Loaded the PDF skill."},
        {"summary": True, "text": "Summary: the user asked to read a PDF; the pdf skill was loaded."},
        {"text": "Still following it."},
    ])
    store = SQLiteStore.for_workspace(workspace)
    agent = Agent(model_for(srv), [], workspace=workspace, store=store, skills=skills)
    assert (await agent.arun("read report.pdf", "s")).status == "completed"
    first, second = srv.requests[:2]
    assert "- pdf: Extract text and tables from PDF files." in system(first)  # the catalog ...
    assert BODY not in json.dumps(first)  # ... but not the body
    assert "use_skill" in tool_names(first)
    [result] = tool_messages(second)
    assert result["content"].startswith(BODY) and ".agents/skills/pdf/forms.md" in result["content"]
    assert BODY in system(second)  # the loaded skill is in the system prompt too

    session = agent.session("s")
    assert session.loaded_skills == {"pdf": BODY}
    assert await agent.compact(session) is not None  # the use_skill exchange is summarised away
    assert (await agent.arun("go on", session)).status == "completed"
    last = srv.requests[-1]
    assert "[shou:compact]" not in system(last) and "Summary: the user asked" in system(last)
    assert not tool_messages(last)  # the tool result is gone from the conversation ...
    assert BODY in system(last)  # ... and the skill is still loaded
    store.close()


async def test_without_skills_there_is_no_catalog_and_no_tool(serve, workspace: Path) -> None:
    srv = serve([{"text": "hi"}])
    skills = load_skills(workspace, None, trusted=True)
    assert (await Agent(model_for(srv), [], workspace=workspace, skills=skills).arun("hello")).status == "completed"
    assert "## Skills" not in system(srv.requests[0]) and "use_skill" not in tool_names(srv.requests[0])


async def test_use_skill_is_offered_even_when_tools_are_picked_by_relevance(serve, workspace: Path) -> None:
    from shou import Tool

    many = [Tool(f"weather_{i}", "Weather forecasts for a city.", None, lambda: "sunny") for i in range(15)]
    many += [Tool(f"stocks_{i}", "Share prices on an exchange.", None, lambda: "up") for i in range(15)]
    write_skill(workspace / ".agents" / "skills" / "pdf")
    srv = serve([{"text": "ok"}])
    agent = Agent(model_for(srv), many, workspace=workspace, skills=load_skills(workspace, None, trusted=True))
    assert (await agent.arun("what is the weather forecast in Paris")).status == "completed"
    offered = tool_names(srv.requests[0])
    assert "use_skill" in offered and "stocks_0" not in offered  # picked by relevance, use_skill kept


def trust(shou, workspace: Path) -> None:
    (workspace / "shou.toml").write_text("# skills of this repository are fine\n")
    r = shou("trust", "--yes")
    assert r.returncode == 0, r.stderr


def test_an_untrusted_workspace_skill_is_not_loaded_until_trusted(serve, shou, workspace: Path) -> None:
    write_skill(workspace / ".agents" / "skills" / "pdf")
    srv = serve([{"text": "no skills here"}, use_skill("pdf"), {"text": "loaded"}])
    r = shou("run", "read report.pdf", server=srv)
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "not trusted" in r.stderr and "shou trust" in r.stderr
    first = srv.requests[0]
    assert "## Skills" not in system(first) and "pdf" not in system(first)
    assert "use_skill" not in tool_names(first) and BODY not in json.dumps(first)

    trust(shou, workspace)
    r = shou("run", "read report.pdf", server=srv)
    assert r.returncode == 0, r.stderr
    assert "not trusted" not in r.stderr
    assert "- pdf: Extract text" in system(srv.requests[1]) and BODY not in json.dumps(srv.requests[1])
    assert BODY in tool_messages(srv.requests[2])[0]["content"]


def test_an_invalid_skill_is_skipped_with_a_warning(serve, shou, tmp_path: Path, workspace: Path) -> None:
    user = tmp_path / "config" / "skills"
    write_skill(user / "notes", description="Take meeting notes.", body="NOTES-BODY")
    write_skill(user / "Bad-Skill", description="A skill with an invalid name.")
    write_skill(user / "mismatch", name="other", description="Named unlike its folder.")
    srv = serve([{"text": "ok"}])
    r = shou("run", "hello", server=srv)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warning:") == 2
    assert "'Bad-Skill'" in r.stderr and "'mismatch'" in r.stderr and "is skipped" in r.stderr
    catalog = system(srv.requests[0])
    assert "- notes: Take meeting notes." in catalog
    assert "invalid name" not in catalog and "Named unlike" not in catalog and "NOTES-BODY" not in catalog


def test_a_user_skills_files_are_readable_and_the_config_is_not(serve, shou, tmp_path: Path) -> None:
    config = tmp_path / "config"
    folder = write_skill(config / "skills" / "notes", body="NOTES-BODY: follow style.md.")
    (folder / "style.md").write_text("STYLE: one idea per line\n")
    (config / "shou.toml").write_text("max_steps = 9\n")
    srv = serve([
        use_skill("notes"),
        {"tool_calls": [{"name": "read_file", "arguments": {"path": str(folder / "style.md")}, "id": "r1"}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": str(config / "shou.toml")}, "id": "r2"}]},
        {"text": "done"},
    ])
    r = shou("run", "take notes", server=srv)
    assert r.returncode == 0, r.stderr
    assert f"- {folder / 'style.md'}" in tool_messages(srv.requests[1])[0]["content"]
    assert tool_messages(srv.requests[2])[-1]["content"] == "STYLE: one idea per line\n"
    refused = tool_messages(srv.requests[3])[-1]["content"]
    assert refused.startswith("Error:") and "outside the workspace" in refused and "max_steps" not in refused


def test_shou_skills_lists_each_with_its_status(shou, tmp_path: Path, workspace: Path) -> None:
    user = tmp_path / "config" / "skills"
    write_skill(user / "notes", description="Take notes.")
    write_skill(user / "pdf", description="The user's PDF skill.")
    write_skill(user / "bad--name")
    write_skill(workspace / ".agents" / "skills" / "pdf")
    r = shou("skills")
    assert r.returncode == 0, r.stderr
    assert "not trusted" in r.stderr and "shou trust" in r.stderr
    assert "notes" in r.stdout and "bad--name" in r.stdout and "a-z, 0-9" in r.stdout
    assert "workspace" not in r.stdout  # the untrusted workspace's skills are not even listed

    trust(shou, workspace)
    r = shou("skills", "--json")
    assert r.returncode == 0, r.stderr
    rows = {(row["source"], row["name"]): row for row in json.loads(r.stdout)}
    assert set(rows) == {("user", "notes"), ("user", "pdf"), ("user", "bad--name"), ("workspace", "pdf")}
    assert rows[("user", "notes")]["status"] == "valid" and rows[("user", "notes")]["valid"] is True
    assert rows[("user", "notes")]["path"] == str(user / "notes")
    assert rows[("workspace", "pdf")]["status"] == "valid"
    assert rows[("workspace", "pdf")]["path"] == str(workspace / ".agents" / "skills" / "pdf")
    assert rows[("user", "pdf")]["status"] == "overridden by the workspace skill of the same name"
    assert rows[("user", "bad--name")]["valid"] is False and "a-z, 0-9" in rows[("user", "bad--name")]["status"]

    r = shou("skills")
    assert "valid" in r.stdout and "overridden" in r.stdout and r.stderr == ""
