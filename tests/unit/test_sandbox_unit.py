"""Sandbox pieces that need no sandbox: the bubblewrap command line, limits, output capture, languages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shou.errors import ToolError
from shou.sandbox.base import ExecResult, Limits, OutputCapture, new_output_path
from shou.sandbox.bubblewrap import SANDBOX_UID, BubblewrapSandbox
from shou.sandbox.languages import looks_out_of_memory, program


def flags(cmd: list[str]) -> list[str]:
    return cmd[: cmd.index("--", cmd.index("bwrap"))]


def test_bubblewrap_command_isolates_by_default(tmp_path: Path) -> None:
    sb = BubblewrapSandbox(tmp_path)
    cmd = sb.command(["python3", "-c", "pass"], Limits(memory_mb=256, timeout=10), workspace_fd=7,
                     masks=((8, "shou.toml"),), files={"main.py": 9})
    f = flags(cmd)
    init = cmd[cmd.index("shou-init") - 1]  # the init shell sets the rlimits: no exec spent on prlimit
    assert f"ulimit -d {256 * 1024}" in init and "ulimit -c 0" in init
    assert init.index("|| exit 125") < init.index('"$@"')  # no limit, no program
    if os.geteuid() == 0:  # root never runs sandboxed code as root, and never touches modes or ACLs
        assert cmd[cmd.index("setpriv"):][:4] == ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                                                 "--clear-groups"]
    assert not any("setfacl" in a or "chmod" in a for a in cmd)
    assert f[f.index("--ro-bind-fd"):][:3] == ["--ro-bind-fd", "8", "/workspace/shou.toml"]
    shou_dir = f.index("/workspace/.shou") - 1
    assert f[shou_dir: shou_dir + 4] == ["--tmpfs", "/workspace/.shou", "--remount-ro", "/workspace/.shou"]
    assert f[f.index("/dev/shm") - 3: f.index("/dev/shm") + 1] == ["--size", str(256 * 1024 * 1024), "--tmpfs",
                                                                    "/dev/shm"]
    assert "ulimit -S -t 11 && ulimit -H -t 12" in init and "ulimit -p " in init
    for needed in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert needed in f
    assert f[f.index("--cap-drop") + 1] == "ALL"
    assert "--share-net" not in f
    assert f[f.index("--bind-fd"):][:2] == ["--bind-fd", "7"] and "/workspace" in f
    assert f[f.index("--perms"): f.index("--perms") + 5] == ["--perms", "0444", "--file", "9", "/code/main.py"]
    assert ["--remount-ro", "/"] in [f[i: i + 2] for i in range(len(f))]
    assert "/root" not in f and "/home" not in f
    assert cmd[-3:] == ["python3", "-c", "pass"] and "--as-pid-1" in f


def test_cgroup_is_joined_before_anything_else_runs(tmp_path: Path) -> None:
    cmd = BubblewrapSandbox(tmp_path).command(["true"], Limits(), workspace_fd=None, sync_fds=(11, 12))
    f = flags(cmd)
    # bwrap says its child's pid on 11 and holds the child on 12 until shou has moved both into the cgroup.
    assert f[f.index("--info-fd"):][:4] == ["--info-fd", "11", "--block-fd", "12"]
    assert cmd[0] == ("setpriv" if os.geteuid() == 0 else "bwrap")  # no other wrapper is exec'd


def test_network_only_when_asked(tmp_path: Path) -> None:
    sb = BubblewrapSandbox(tmp_path)
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
    spill = new_output_path(tmp_path, "stdout")
    cap = OutputCapture(keep=100, spill_path=spill, spill_limit=10_000)
    for i in range(1000):
        cap.feed(f"{i:05d}\n".encode())
    cap.close()
    assert cap.total == 6000 and cap.omitted == 6000 - 200
    text = cap.text()
    assert text.startswith("00000\n") and text.endswith("00999\n") and "5800 bytes omitted" in text
    assert spill.read_bytes() == b"".join(f"{i:05d}\n".encode() for i in range(1000))
    big = new_output_path(tmp_path, "stderr")
    capped = OutputCapture(keep=10, spill_path=big, spill_limit=50)
    capped.feed(b"x" * 1000)
    capped.close()
    assert big.stat().st_size == 50


def test_a_spill_is_utf8_text_whatever_the_program_printed(tmp_path: Path) -> None:
    """The model is told to read the spill with read_file, which reads UTF-8 only: bytes that are not UTF-8
    are written as U+FFFD, and a character cut between two chunks is written whole."""
    from shou.tools.linewindow import read_window

    spill = new_output_path(tmp_path, "stdout")
    cap = OutputCapture(keep=10, spill_path=spill, spill_limit=10_000)
    for chunk in [b"caf\xc3", b"\xa9 ", b"\xff" * 30, b" \xe2\x82", b"\xac end\n", b"\xe2\x82"]:
        cap.feed(chunk)
    cap.close()
    text = spill.read_bytes().decode("utf-8")  # strict: it is all UTF-8
    assert text == "caf\u00e9 " + "\ufffd" * 30 + " \u20ac end\n\ufffd"
    fd = os.open(spill, os.O_RDONLY)
    try:
        assert read_window(fd, "spill", 1, None).startswith("caf\u00e9 \ufffd")
    finally:
        os.close(fd)


def test_small_output_never_touches_the_disk(tmp_path: Path) -> None:
    never = new_output_path(tmp_path, "stdout")
    cap = OutputCapture(keep=100, spill_path=never)
    cap.feed(b"hello\n")
    cap.close()
    assert cap.text() == "hello\n" and not never.exists()


def test_spilling_never_follows_a_link_in_shou(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / ".shou").mkdir()
    (tmp_path / ".shou" / "outputs").symlink_to(victim, target_is_directory=True)
    cap = OutputCapture(keep=10, spill_path=new_output_path(tmp_path, "stdout"))
    cap.feed(b"x" * 100)  # the output is still kept in memory (head and tail), just not saved
    cap.close()
    assert "symlink" in cap.spill_error and cap.spill_path is None and cap.total == 100
    assert list(victim.iterdir()) == []


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


def test_a_spill_of_bytes_that_are_not_utf8_stays_within_its_limit_and_its_count(tmp_path: Path) -> None:
    """The spill is re-encoded (each bad byte becomes U+FFFD, three bytes), but `spilled` and `spill_limit`
    still count the program's bytes: the file outgrows its limit threefold, and the disk watch, which discounts
    `spilled` as shou's own writes, charges the other two thirds to the program (killed for a disk allowance
    it never used)."""
    (tmp_path / ".shou" / "outputs").mkdir(parents=True)
    path = new_output_path(tmp_path, "stdout")
    cap = OutputCapture(keep=1000, spill_path=path, spill_limit=100_000)
    for _ in range(100):
        cap.feed(b"\xff" * 10_000)
    cap.close()
    size = path.stat().st_size
    assert size <= cap.spill_limit, f"the spill is {size} bytes, its limit {cap.spill_limit}"
    assert size == cap.spilled, f"spilled says {cap.spilled} bytes, the file on disk has {size}"
