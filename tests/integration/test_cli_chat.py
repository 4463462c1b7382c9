"""`shou chat` driven through a pseudo-terminal: two turns, /clear, /quit."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect

from .conftest import shou_env


def test_chat_two_turns_clear_and_quit(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "123 * 45"}}]},
        {"text": "It is 5535."},
        {"text": "You asked about 123 * 45."},
        {"text": "A fresh start."},
    ])
    env = shou_env(tmp_path, srv, PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "shou", "chat", "--session", "talk"], cwd=str(workspace),
                          env=env, encoding="utf-8", timeout=30, dimensions=(40, 200))
    try:
        child.expect("session talk")
        child.expect("›")
        child.sendline("What is 123 * 45?")
        child.expect("calculator")
        child.expect("It is 5535.")
        child.expect("completed")
        child.expect("›")
        child.sendline("What did I ask?")
        child.expect("You asked about 123 \\* 45.")
        child.expect("›")
        child.sendline("/clear")
        child.expect("conversation cleared")
        child.expect("›")
        child.sendline("Hello again")
        child.expect("A fresh start.")
        child.expect("›")
        child.sendline("/quit")
        child.expect("bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    second_turn = [m["content"] for m in srv.requests[2]["messages"] if m["role"] in ("user", "assistant")]
    assert second_turn == ["What is 123 * 45?", None, "It is 5535.", "What did I ask?"]
    after_clear = [m["role"] for m in srv.requests[3]["messages"]]
    assert after_clear == ["system", "user"]
    assert (tmp_path / "config" / "history").read_text().count("What is 123 * 45?") == 1


def test_chat_ctrl_d_and_chinese_quit_word(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([])
    env = shou_env(tmp_path, srv, PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    for leave in ("退出", "\x04"):
        child = pexpect.spawn(sys.executable, ["-m", "shou", "chat"], cwd=str(workspace), env=env,
                              encoding="utf-8", timeout=30)
        child.expect("›")
        if leave == "\x04":
            child.sendcontrol("d")
        else:
            child.sendline(leave)
        child.expect("bye")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    assert srv.requests == []


def test_chat_multi_line_paste_is_one_message(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([{"text": "Got both lines."}])
    env = shou_env(tmp_path, srv, PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "shou", "chat"], cwd=str(workspace), env=env,
                          encoding="utf-8", timeout=30)
    try:
        child.expect("›")
        child.send("\x1b[200~first line\nsecond line\x1b[201~")  # a terminal's bracketed paste
        child.send("\r")
        child.expect("Got both lines.")
        child.expect("›")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert srv.requests[0]["messages"][-1] == {"role": "user", "content": "first line\nsecond line"}


def test_chat_compact_command(serve, tmp_path: Path, workspace: Path) -> None:
    srv = serve([
        {"text": "Nice to meet you, 枫哥."},
        {"text": "Noted: the deadline is Friday."},
        {"text": "Your name is 一枫 and the deadline is Friday."},
        {"summary": True, "text": "The user is 一枫 (call him 枫哥); the deadline is Friday."},
    ])
    env = shou_env(tmp_path, srv, PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "shou", "chat"], cwd=str(workspace), env=env,
                          encoding="utf-8", timeout=30, dimensions=(40, 200))
    try:
        for line, reply in (("My name is 一枫, call me 枫哥", "枫哥"), ("The deadline is Friday", "Friday")):
            child.expect("›")
            child.sendline(line)
            child.expect(reply)
        child.expect("›")
        child.sendline("/compact")
        child.expect(r"compacted: \d+ → \d+ tokens")
        child.expect("›")
        child.sendline("What do you know?")
        child.expect("deadline is Friday")
        child.expect("›")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    last = srv.requests[-1]["messages"]
    assert "Summary of the earlier conversation" in last[0]["content"] and "一枫" in last[0]["content"]
    assert [m["role"] for m in last[1:]] == ["assistant", "user"]  # the newest block kept verbatim, then the question
