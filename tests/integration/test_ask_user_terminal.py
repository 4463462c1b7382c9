"""`ask_user` in a real terminal (tmux): `shou chat` offers the tool, the question is prompted with its choices
numbered, a number picks a choice, and the answer goes back to the model as the call's result."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from ..fixtures.needs import need
from ..fixtures.terminal import Tmux
from .conftest import shou_env, tool_messages


def test_chat_prompts_the_question_on_the_terminal(serve, tmp_path: Path, workspace: Path) -> None:
    need(shutil.which("tmux") is not None, "tmux is installed (.ci/install)")
    srv = serve([{"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which colour?",
                                                                     "choices": ["red", "blue"]}}]},
                 {"text": "Painting it blue."},
                 {"tool_calls": [{"name": "ask_user", "arguments": {"question": "How many coats?"}}]},
                 {"text": "Three coats it is."}])
    env = shou_env(tmp_path, srv, TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    term = Tmux(workspace, env)
    try:
        term.type(f"{shlex.quote(sys.executable)} -m shou chat -s shed")
        term.wait_for("›")
        term.type("paint the shed")
        term.wait_for(r"the agent asks: Which colour\?")
        screen = term.wait_for(r"answer \(a number \(1-2\) or your own words\):")
        assert "1. red" in screen and "2. blue" in screen
        term.type("2")
        term.wait_for(r"Painting it blue\.\s+completed · session shed")
        term.type("and the coats?")
        term.wait_for(r"the agent asks: How many coats\?")
        term.wait_for(r"answer \(your answer\):")
        term.type("three, please")
        term.wait_for(r"Three coats it is\.\s+completed · session shed")
        term.type("/quit")
        term.wait_for("bye")
    finally:
        term.close()
    assert "ask_user" in [t["function"]["name"] for t in srv.requests[0]["tools"]]
    assert tool_messages(srv.requests[1])[0]["content"] == "blue"
    assert tool_messages(srv.requests[3])[-1]["content"] == "three, please"
