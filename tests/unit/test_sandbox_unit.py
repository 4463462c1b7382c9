"""Sandbox pieces that need no sandbox: the bubblewrap command line, limits, output capture, languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.sandbox.base import ExecResult, Limits, OutputCapture
from shou.sandbox.bubblewrap import BubblewrapSandbox
from shou.sandbox.languages import looks_out_of_memory, program


def flags(cmd: list[str]) -> list[str]:
    return cmd[: cmd.index("--", cmd.index("bwrap"))]


def test_bubblewrap_command_isolates_by_default(tmp_path: Path) -> None:
    sb = BubblewrapSandbox(tmp_path, uid=65534)
    cmd = sb.command(["python3", "-c", "pass"], Limits(memory_mb=256, timeout=10), workspace_fd=7,
                     files={"main.py": 9})
    f = flags(cmd)
    assert cmd[0] == "prlimit" and f"--data={256 * 1024 * 1024}" in cmd and "--core=0" in cmd
    assert "--cpu=11:12" in cmd and any(a.startswith("--nproc=") for a in cmd)
    for needed in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert needed in f
    assert f[f.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in f
    assert f[f.index("--bind-fd"):][:2] == ["--bind-fd", "7"] and "/workspace" in f
    assert f[f.index("--perms"): f.index("--perms") + 5] == ["--perms", "0444", "--file", "9", "/code/main.py"]
    assert f[f.index("--remount-ro"): f.index("--remount-ro") + 2] == ["--remount-ro", "/"]
    assert "/root" not in f and "/home" not in f
    assert cmd[-3:] == ["python3", "-c", "pass"] and "--as-pid-1" in f


def test_network_only_when_asked(tmp_path: Path) -> None:
    sb = BubblewrapSandbox(tmp_path, uid=65534)
    f = flags(sb.command(["true"], Limits(network=True), workspace_fd=None, files={}))
    assert "--share-net" in f


def test_limits_are_clamped_to_the_ceiling() -> None:
    ceiling = Limits(timeout=60, memory_mb=512, processes=32, network=False, cpu_seconds=30)
    asked = Limits(timeout=600, memory_mb=4096, processes=1000, network=True, cpu_seconds=None)
    got = asked.within(ceiling)
    assert (got.timeout, got.memory_mb, got.processes, got.network, got.cpu) == (60, 512, 32, False, 30)
    assert Limits(timeout=5).within(ceiling).timeout == 5  # tighter is fine
    with pytest.raises(ValueError, match="unknown limit"):
        Limits().with_(memroy_mb=1)


def test_output_capture_keeps_head_and_tail_and_spills(tmp_path: Path) -> None:
    spill = tmp_path / "out.txt"
    cap = OutputCapture(keep=100, spill_path=spill, spill_limit=10_000)
    for i in range(1000):
        cap.feed(f"{i:05d}\n".encode())
    cap.close()
    assert cap.total == 6000 and cap.omitted == 6000 - 200
    text = cap.text()
    assert text.startswith("00000\n") and text.endswith("00999\n") and "5800 bytes omitted" in text
    assert spill.read_bytes() == b"".join(f"{i:05d}\n".encode() for i in range(1000))
    capped = OutputCapture(keep=10, spill_path=tmp_path / "big.txt", spill_limit=50)
    capped.feed(b"x" * 1000)
    capped.close()
    assert (tmp_path / "big.txt").stat().st_size == 50


def test_small_output_never_touches_the_disk(tmp_path: Path) -> None:
    cap = OutputCapture(keep=100, spill_path=tmp_path / "never.txt")
    cap.feed(b"hello\n")
    cap.close()
    assert cap.text() == "hello\n" and not (tmp_path / "never.txt").exists()


def test_languages_pass_heap_limits() -> None:
    limits = Limits(memory_mb=512)
    java, files = program("java", "class Main {}", limits)
    assert "-Xmx256m" in java and "Main.java" in files
    node, _ = program("JavaScript", "1", limits)
    assert "--max-old-space-size=256" in node
    assert program("py", "print(1)", limits)[1] == {"main.py": b"print(1)"}
    with pytest.raises(ToolError, match="unknown language 'cobol'"):
        program("cobol", "", limits)
    assert looks_out_of_memory("Exception in thread main java.lang.OutOfMemoryError: Java heap space")
    assert not looks_out_of_memory("SyntaxError: invalid syntax")


def test_result_text_for_the_model() -> None:
    r = ExecResult("out\n", "err\n", None, 2.0, "timeout", note="the time limit is 2 s", output_path=".shou/x")
    text = r.for_model()
    assert text.splitlines()[0] == "stopped: it ran past the time limit (2.00 s)"
    assert "--- stdout ---\nout" in text and "--- stderr ---\nerr" in text and ".shou/x" in text
