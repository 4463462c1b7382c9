"""How a Docker sandbox's run ended, from its captured output, exit status and the limits it hit (shared by
the per-call and the warm container)."""

from __future__ import annotations

from pathlib import Path

from .base import ExecResult, ExitReason, Limits, OutputCapture
from .languages import looks_out_of_memory
from .quota import DiskWatch

# Exit status of a process killed by SIGXCPU (24 on Linux, which is what containers run, whatever the host).
CPU_LIMIT_STATUS = 128 + 24


def docker_result(out: OutputCapture, err: OutputCapture, exit_code: int | None, reason: ExitReason, oom_killed: bool,
            duration: float, limits: Limits, disk: DiskWatch, workspace: Path) -> ExecResult:
    """The result of a run whose output is in `out` and `err`, with notes naming the limit it hit."""
    stderr = err.text()
    if reason == "exit":
        reason = exit_reason(exit_code, oom_killed, stderr)
    spilled = [str(c.spill_path.relative_to(workspace)) for c in (out, err) if c.spill_path and c.spilled]
    notes = [f"it ran out of memory: the limit is {limits.memory_mb} MB"] if reason == "memory" else []
    if reason == "disk":
        notes.append(disk.exceeded)
    if len(spilled) > 1:
        notes.append(f"[the full stderr is in {spilled[1]}]")
    if unsaved := out.spill_error or err.spill_error:
        notes.append(f"the full output could not be saved ({unsaved})")
    return ExecResult(
        stdout=out.text(), stderr=stderr, exit_code=exit_code, duration=duration, reason=reason,
        stdout_omitted=out.omitted, stderr_omitted=err.omitted, output_path=spilled[0] if spilled else None,
        note="; ".join(notes),
    )


def exit_reason(exit_code: int | None, oom_killed: bool, stderr: str) -> ExitReason:
    """Why a container that exited by itself ended: memory, CPU time, or its own exit."""
    # A process of the tree killed for memory is reported even when the first one exits 0 (as bubblewrap does).
    if oom_killed or (exit_code != 0 and looks_out_of_memory(stderr)):
        return "memory"
    return "cpu" if exit_code == CPU_LIMIT_STATUS else "exit"
