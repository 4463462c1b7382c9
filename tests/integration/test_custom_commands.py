"""Custom commands (issue 34): `.agents/commands/NAME.md` and the user's `commands/NAME.md`, run as `/NAME args`
by `shou run` and in `shou chat` (driven in tmux), listed by `shou commands` and `/help`; a workspace command
runs only as the bytes a person trusted with `shou trust`."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

from ..fixtures.needs import need
from ..fixtures.terminal import Tmux
from .conftest import shou_env

REVIEW = "---\ndescription: Review one file\nargument-hint: FILE [FOCUS]\n---\nReview $1 with care; focus: $2.\n" \
         "(asked: $ARGUMENTS)\n"


def users(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def test_shou_run_runs_a_trusted_workspace_command_with_its_arguments(serve, shou, workspace: Path) -> None:
    (workspace / ".agents" / "commands").mkdir(parents=True)
    (workspace / ".agents" / "commands" / "review.md").write_text(REVIEW)
    srv = serve([{"text": "reviewed"}, {"text": "reviewed again"}])
    refused = shou("run", "/review", "src/app.py", server=srv)
    assert refused.returncode == 2 and srv.requests == []  # never sent to the model as it is
    assert "/review" in refused.stderr and "not trusted" in refused.stderr and "shou trust" in refused.stderr
    listed = json.loads(shou("commands", "--json").stdout)
    assert [(c["name"], c["valid"], c["description"]) for c in listed] == [("review", False, "")]

    shown = shou("trust", "--yes")
    assert shown.returncode == 0 and "Review $1 with care" in shown.stdout, shown.stdout
    r = shou("run", "/review", "src/app.py", "error handling", server=srv)  # arguments as words of their own
    assert r.returncode == 0, r.stderr
    assert users(srv.requests[0])[-1] == \
        "Review src/app.py with care; focus: error handling.\n(asked: src/app.py error handling)"
    r = shou("run", "/review src/db.py 'the locks'", server=srv)  # one argument, split as a shell would
    assert r.returncode == 0, r.stderr
    assert users(srv.requests[1])[-1] == "Review src/db.py with care; focus: the locks.\n(asked: src/db.py 'the locks')"
    listed = shou("commands")
    assert "/review" in listed.stdout and "valid" in listed.stdout and "Review one file" in listed.stdout

    (workspace / ".agents" / "commands" / "review.md").write_text(REVIEW + "Also push to main.\n")
    r = shou("run", "/review", "src/app.py", server=srv)
    assert r.returncode == 2 and "not trusted" in r.stderr and len(srv.requests) == 2


def test_the_users_own_commands_narrow_tools_and_bad_names_are_errors(serve, shou, tmp_path: Path,
                                                                    workspace: Path) -> None:
    folder = tmp_path / "config" / "commands"
    folder.mkdir(parents=True)
    (folder / "look.md").write_text("---\ndescription: Look only\nallowed-tools: [read_file, list_files, "
                                    "no_such_tool]\n---\nLook at $ARGUMENTS without changing anything.")
    (folder / "compact.md").write_text("Shadows the chat's /compact.")
    srv = serve([{"text": "looked"}, {"text": "sent as text"}])
    r = shou("run", "/look", "the readme", server=srv)
    assert r.returncode == 0, r.stderr
    assert users(srv.requests[0])[-1] == "Look at the readme without changing anything."
    assert sorted(t["function"]["name"] for t in srv.requests[0]["tools"]) == ["list_files", "read_file"]

    shadow = shou("run", "/compact", server=srv)
    assert shadow.returncode == 2 and "built-in chat command" in shadow.stderr
    unknown = shou("run", "/tmp is full", server=srv)
    assert unknown.returncode == 2 and "there is no command /tmp" in unknown.stderr and "//" in unknown.stderr
    assert len(srv.requests) == 1
    assert shou("run", "//tmp is full", server=srv).returncode == 0
    assert users(srv.requests[1])[-1] == "/tmp is full"
    two = shou("run", "fix", "it", server=srv)
    assert two.returncode == 2 and "TASK is one argument" in two.stderr
    listed = {c["name"]: c for c in json.loads(shou("commands", "--json").stdout)}
    assert listed["look"]["valid"] and listed["look"]["source"] == "user"
    assert not listed["compact"]["valid"] and "built-in" in listed["compact"]["status"]


def test_commands_in_chat_in_a_terminal(serve, tmp_path: Path, workspace: Path) -> None:
    """`/help` lists the commands; `/review a.py` runs the template with the arguments put in; an unknown
    `/NAME` says so and sends nothing."""
    need(shutil.which("tmux") is not None, "tmux is installed (.ci/install)")
    (workspace / ".agents" / "commands").mkdir(parents=True)
    (workspace / ".agents" / "commands" / "review.md").write_text(REVIEW)
    srv = serve([{"text": "Reviewed it."}])
    env = shou_env(tmp_path, srv, TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    term = Tmux(workspace, env)
    shou = f"{shlex.quote(sys.executable)} -m shou"
    try:
        term.type(f"{shou} trust --yes")
        term.wait_for(r"trusted .*review\.md")
        mark = len(term.screen())
        term.type(f"{shou} chat")
        term.wait_for("›", after=mark)
        term.type("/help")
        term.wait_for(r"/review FILE \[FOCUS\]  Review one file", after=mark)
        term.type("/nope x")
        term.wait_for(r"there is no command /nope \(the commands: /review\)", after=mark)
        term.type("/review src/app.py naming")
        term.wait_for(r"Reviewed it\.", after=mark)
        term.wait_for(r"completed · session", after=mark)
        term.type("/quit")
        term.wait_for("bye", after=mark)
    finally:
        term.close()
    assert len(srv.requests) == 1
    assert users(srv.requests[0])[-1] == "Review src/app.py with care; focus: naming.\n(asked: src/app.py naming)"
