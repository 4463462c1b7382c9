"""No isolation: commands run as this user, in the workspace, with rlimits only. Opt-in, with a warning.

Meant for machines where neither bubblewrap nor Docker works and the user accepts the risk
(`--sandbox local`). Code files are written to a private temporary folder that stands in for `/code`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .base import ExecResult, Limits, new_output_path
from .languages import program
from .process import exec_result, kill_group, spawn_and_wait

WARNING = ("warning: the 'local' sandbox backend does not isolate anything: code and commands run as you, "
           "with your files and your network")


_warned = False


def warn_once() -> None:
    """Print the no-isolation warning to stderr, once per process."""
    global _warned
    if not _warned:
        _warned = True
        print(WARNING, file=sys.stderr)


class LocalSandbox:
    """Runs commands directly (no namespaces); `/code/...` in argv points at a private temp folder."""

    name = "local"

    def __init__(self, workspace: str | Path, limits: Limits | None = None, *, warn: bool = True) -> None:
        self.workspace = Path(workspace).resolve()
        self.limits = limits or Limits()
        if warn:
            warn_once()

    @staticmethod
    def available() -> tuple[bool, str]:
        """Always usable, never safe."""
        return True, "always available, but runs without any isolation (opt in with --sandbox local)"

    def _materialise(self, argv: list[str], files: dict[str, bytes] | None) -> tuple[list[str], str | None]:
        if not files:
            return argv, None
        folder = tempfile.mkdtemp(prefix="shou-code-")
        for name, data in files.items():
            Path(folder, name).write_bytes(data)
        return [a.replace("/code/", folder + "/", 1) if a.startswith("/code/") else a for a in argv], folder

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}

    async def run(self, argv: list[str], *, stdin: bytes | None = None, limits: Limits | None = None,
                  files: dict[str, bytes] | None = None) -> ExecResult:
        """Run `argv` in the workspace under rlimits set by prlimit when it exists."""
        limits = (limits or self.limits).within(self.limits)
        argv, folder = self._materialise(argv, files)
        if shutil.which("prlimit"):
            mb = 1024 * 1024
            argv = ["prlimit", f"--data={limits.memory_mb * mb}", f"--cpu={limits.cpu}:{limits.cpu + 1}",
                    f"--fsize={limits.file_size_mb * mb}", "--core=0", "--", *argv]
        try:
            done = await spawn_and_wait(
                argv, cwd=self.workspace, env=self._env(), stdin=stdin, timeout=limits.timeout,
                spill=(new_output_path(self.workspace, "stdout"), new_output_path(self.workspace, "stderr")),
            )
        finally:
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        return exec_result(done, self.workspace, limits)

    async def run_code(self, language: str, code: str, *, limits: Limits | None = None) -> ExecResult:
        """Run a program in python, bash, node or java."""
        effective = (limits or self.limits).within(self.limits)
        argv, files = program(language, code, effective)
        return await self.run(argv, limits=effective, files=files)

    async def start(self, argv: list[str], *, limits: Limits | None = None,
                    files: dict[str, bytes] | None = None) -> LocalStarted:
        """Start a long-lived process with stdin/stdout pipes."""
        argv, folder = self._materialise(argv, files)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            cwd=self.workspace, env=self._env(), start_new_session=True, limit=2**24,
        )
        return LocalStarted(proc, folder)


class LocalStarted:
    """A long-lived local process; `stop()` kills its group and removes its code folder."""

    def __init__(self, proc: asyncio.subprocess.Process, folder: str | None) -> None:
        self.proc = proc
        self.folder = folder

    async def stop(self) -> None:
        """Kill and reap."""
        kill_group(self.proc.pid)
        await self.proc.wait()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
