"""shell and run_code as the model uses them, through `shou run` and the scripted model."""

from __future__ import annotations

from pathlib import Path

from .conftest import tool_messages


def test_agent_counts_python_lines_with_the_shell(serve, shou, workspace: Path) -> None:
    (workspace / "pkg").mkdir()
    (workspace / "a.py").write_text("".join(f"x{i} = {i}\n" for i in range(10)))
    (workspace / "pkg" / "b.py").write_text("".join(f"# line {i}\n" for i in range(25)))
    (workspace / "pkg" / "c.py").write_text("def f():\n    return 1\n\n\nprint(f())\n" * 3)
    (workspace / "notes.txt").write_text("not python\n" * 100)
    expected = 10 + 25 + 15
    srv = serve([
        {"tool_calls": [{"name": "shell", "arguments": {"command": "find . -name '*.py' | xargs cat | wc -l"}}]},
        {"text": f"The .py files have {expected} lines in total."},
    ])
    r = shou("run", "How many lines do the .py files in this workspace have?", server=srv)
    assert r.returncode == 0, r.stderr
    offered = {t["function"]["name"] for t in srv.requests[0]["tools"]}
    assert {"shell", "run_code"} <= offered  # offered by default
    [result] = tool_messages(srv.requests[1])
    assert result["content"].startswith("exit code 0") and f"\n{expected}" in result["content"]
    assert str(expected) in r.stdout


def test_run_code_stateful_across_turns_of_one_run(serve, shou) -> None:
    srv = serve([
        {"tool_calls": [{"name": "run_code", "arguments": {"language": "python", "code": "x = 41", "stateful": True}}]},
        {"tool_calls": [{"name": "run_code",
                         "arguments": {"language": "python", "code": "print(x + 1)", "stateful": True}}]},
        {"tool_calls": [{"name": "run_code", "arguments": {"language": "java", "code": "class Main { "
                         "public static void main(String[] a) { System.out.println(6 * 7); } }"}}]},
        {"text": "42"},
    ])
    r = shou("run", "remember 41, add one, and check with java", server=srv)
    assert r.returncode == 0, r.stderr
    assert "--- stdout ---\n42" in tool_messages(srv.requests[2])[-1]["content"]
    assert "--- stdout ---\n42" in tool_messages(srv.requests[3])[-1]["content"]


def test_unknown_backend_is_a_clear_error(shou, serve) -> None:
    r = shou("run", "x", "--sandbox", "vm", server=serve([]))  # the flag offers its choices
    assert r.returncode == 2
    assert "--sandbox" in r.stderr and "'auto', 'bubblewrap', 'docker', 'local'" in r.stderr
    r = shou("run", "x", server=serve([]), SHOU_SANDBOX="vm")  # so does the setting
    assert r.returncode == 2
    assert "sandbox" in r.stderr and "choose one of auto, bubblewrap, docker, local" in r.stderr


def test_doctor_reports_backends_and_runtimes(shou) -> None:
    r = shou("doctor")
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.strip()}
    assert "yes" in lines["bubblewrap"] and "yes" in lines["local"]
    assert "docker" in lines
    for runtime in ("python", "bash", "node", "java"):
        assert runtime in lines and "fails" not in lines[runtime]
    assert lines["python"].split()[-1].startswith("3.")


def test_local_backend_warns_once_at_start(serve, shou) -> None:
    srv = serve([{"tool_calls": [{"name": "shell", "arguments": {"command": "echo $((6*7))"}}]}, {"text": "no"},
                 {"tool_calls": [{"name": "shell", "arguments": {"command": "echo $((6*7))"}}]}, {"text": "42"}])
    # Without isolation shell asks first; with no terminal and no --yes, that is a no.
    r = shou("run", "x", "--sandbox", "local", server=srv)
    assert r.returncode == 0, r.stderr
    assert "sandbox = local" in tool_messages(srv.requests[1])[0]["content"]
    srv.requests.clear()
    r = shou("run", "x", "--sandbox", "local", "--yes", server=srv)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("does not isolate anything") == 1
    assert r.stderr.index("does not isolate") < r.stderr.index("→ shell")
    assert "\n42" in tool_messages(srv.requests[1])[0]["content"]
