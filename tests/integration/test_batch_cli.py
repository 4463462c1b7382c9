"""`shou batch TASKS.jsonl` through the real command: each task in a fresh copy of its fixture, one result line
each with what it did and spent, the files it wrote kept beside, and the same command again adding nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = [
    {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "summary.md", "content": "# Summary\nshort\n"}}]},
    {"text": "Wrote summary.md"},
]


def _shou(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shou", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_COLOR": "1"})


def test_a_batch_runs_each_task_in_its_own_copy_and_keeps_what_it_wrote(tmp_path: Path) -> None:
    fixture = tmp_path / "fixtures" / "notes"
    fixture.mkdir(parents=True)
    (fixture / "notes.txt").write_text("a long note\n")
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in [
        {"id": "first", "task": "Summarise notes.txt into summary.md", "files": "fixtures/notes"},
        {"id": "second", "task": "Summarise notes.txt into summary.md", "files": "fixtures/notes"},
        {"task": "no id: it gets its line number", "files": {"notes.txt": "inline\n"}},
    ]) + "\n")
    done = _shou("batch", str(tasks), "--model", "scripted:" + str(tmp_path / "script.json"), "-j", "2",
                 "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["case"] for r in lines) == ["first", "line-3", "second"]
    for r in lines:
        assert r["status"] == "completed" and r["outcome"] == "pass" and r["answer"] == "Wrote summary.md"
        assert r["steps"] == 3 and r["tokens"]["total"] > 0 and r["latency"] > 0
        assert r["wrote"] == ["summary.md"]  # notes.txt is the fixture's, unchanged
        ws = tmp_path / "out" / r["workspace"]
        assert (ws / "summary.md").read_text() == "# Summary\nshort\n"
        assert (ws / ".shou" / "shou.db").is_file()  # its session: `shou show` and `shou trace` read it there
    assert (fixture / "summary.md").exists() is False  # the fixture itself is never written to
    shown = _shou("show", lines[0]["session"], "-w", str(tmp_path / "out" / lines[0]["workspace"]), cwd=tmp_path)
    assert shown.returncode == 0 and "summary.md" in shown.stdout

    again = _shou("batch", str(tasks), "--model", "scripted:" + str(tmp_path / "script.json"), "--out", "out",
                  cwd=tmp_path)
    assert again.returncode == 0 and "3 of 3 samples have results already" in again.stderr
    assert (tmp_path / "out" / "results.jsonl").read_text().count("\n") == 3

    other = _shou("batch", str(tasks), "--model", "scripted:elsewhere.json", "--out", "out", cwd=tmp_path)
    assert other.returncode == 2 and "holds another run" in other.stderr and "Traceback" not in other.stderr


def test_a_bad_task_file_is_a_clear_error(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "ok"}\n{"id": "b", "task": "x", "files": "../../etc"}\n')
    done = _shou("batch", str(tasks), cwd=tmp_path)
    assert done.returncode == 2 and "tasks.jsonl:2" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "shou-results").exists()


def test_a_case_field_of_a_wrong_type_is_an_error_naming_the_line_for_batch_and_eval(tmp_path: Path) -> None:
    # these were tracebacks: a TypeError from the task, one from the limits after the progress bar began, and an
    # IsADirectoryError from writing the fixture file "" (the workspace itself)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "done"}]))
    tasks = tmp_path / "tasks.jsonl"
    for line in ('{"id":"a","task":123}', '{"id":"a","task":"x","limits":{"steps":"ten"}}',
                 '{"id":"a","task":"x","files":{"":"x"}}', '{"id":"a","task":"x","files":{".":"x"}}'):
        tasks.write_text('{"id":"ok","task":"x"}\n' + line + "\n")
        for command in ("batch", "eval"):
            done = _shou(command, str(tasks), "--out", str(tmp_path / "out"), "--model", f"scripted:{script}",
                         cwd=tmp_path)
            assert done.returncode == 2, (line, command, done.stderr)
            assert "tasks.jsonl:2: " in done.stderr and "Traceback" not in done.stderr, (line, command, done.stderr)


def test_a_tampered_results_folder_is_an_error_when_the_batch_is_resumed(tmp_path: Path) -> None:
    # each change was a traceback from the same command run again (to go on where it stopped); nothing in the
    # folder is moved aside or changed
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "done"}]))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id":"a","task":"x"}\n')
    args = ("batch", str(tasks), "--out", "out", "--model", f"scripted:{script}")
    assert _shou(*args, cwd=tmp_path).returncode == 0
    results, run = tmp_path / "out" / "results.jsonl", tmp_path / "out" / "run.json"
    line, manifest = json.loads(results.read_text()), json.loads(run.read_text())
    for name, change in (("results.jsonl", {"case": [1]}), ("results.jsonl", {"tokens": None}),
                         ("results.jsonl", {"epoch": "zz"}), ("results.jsonl", {"cost": "zz"}),
                         ("results.jsonl", {"model": 5}), ("results.jsonl", {"latency": "zz"}),
                         ("run.json", {"created": 10**30})):
        results.write_text(json.dumps({**line, **change} if name == "results.jsonl" else line) + "\n")
        run.write_text(json.dumps({**manifest, **change} if name == "run.json" else manifest))
        before = results.read_text(), run.read_text()
        done = _shou(*args, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (change, done.stderr)
        assert f"{name}" in done.stderr and "error: " in done.stderr, (change, done.stderr)
        assert (results.read_text(), run.read_text()) == before


def test_a_count_too_large_is_refused_not_a_hang(tmp_path: Path) -> None:
    # --epochs 10**20 hung counting and making its samples, --jobs the same; --limit 10**20 was an OverflowError
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id":"a","task":"x"}\n')
    huge = "99999999999999999999"
    for args in (("eval", str(tasks), "--out", "out", "--epochs", huge, "--model", "oracle"),
                 ("batch", str(tasks), "--out", "out", "--jobs", huge, "--model", "oracle"),
                 ("run", "--max-steps", huge, "x"), ("run", "--max-cost", "inf", "x"),
                 ("memory", "list", "--limit", huge), ("memory", "forget", "--unused-days", "nan")):
        done = _shou(*args, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "Invalid value" in done.stderr, (args, done.stderr)
    assert not (tmp_path / "out").exists()
