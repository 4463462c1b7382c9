"""`python -m shou` started in a workspace imports nothing a program left there.

`python -m` puts the working folder first on sys.path. A sandboxed program could leave `typing.py`,
`asyncio/__init__.py` or `__future__.py` in the workspace, or `shou.py` itself, and the person's next
`python -m shou` there ran it on the host. shou now takes that folder off its path before any other import,
and the sandbox removes a `shou` module or package the program makes at the workspace's top.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shou.sandbox.base import Limits, Sandbox

from .conftest import shou_env
from .test_sandbox_privileges import CONTAINMENT, make, release
from .test_undo import call

# What `shou run` imports on its way to an answer, and what Python imports before any of shou's own code runs
MODULES = ("__future__", "typing", "importlib", "asyncio", "json", "dataclasses", "sqlite3", "aiohttp", "orjson",
           "tiktoken", "pydantic", "typer", "rich", "click", "logging", "traceback", "linecache", "enum", "re",
           "hashlib", "contextlib", "functools", "pathlib", "tempfile", "uuid", "socket", "ssl", "signal")


def plant(folder: Path, marker: Path) -> None:
    for name in MODULES:
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")


def test_modules_in_the_working_folder_are_not_imported(serve, workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    plant(workspace, marker)
    srv = serve([call("read_file", path="typing.py"), {"text": "done"}])
    for args in (["--help"], ["run", "read typing.py", "--session", "s1"]):
        r = subprocess.run([sys.executable, "-m", "shou", *args], cwd=workspace, env=shou_env(tmp_path, srv),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not marker.exists(), marker.read_text()
    assert "done" in r.stdout


@pytest.fixture(params=CONTAINMENT)
def sb(request: pytest.FixtureRequest, workspace: Path) -> Iterator[Sandbox]:
    box = make(str(request.param), workspace, Limits(timeout=60))
    yield box
    release(box)


SHOU_FORMS = {
    "module": "echo 'import os' > shou.py",
    "package": "echo 'import os' > shou/__init__.py",
    "person's folder renamed away": "mv shou shou-old && mkdir shou && echo 'import os' > shou/__init__.py && "
                                    "mv shou-old/plan.md shou/",
    "link to a package": "mkdir pkg && echo 'import os' > pkg/__init__.py && mv shou shou-old && ln -s pkg shou "
                         "&& ln -s pkg/__init__.py shou.py && mkdir shou-new && mv shou-old/plan.md shou-new/",
    "compiled": "python3 -c \"import py_compile; open('m.py', 'w').write('x = 1'); py_compile.compile('m.py', "
                "'shou.pyc')\"",
    "extension": "echo x > shou.abi3.so && echo x > shou.cpython-311-x86_64-linux-gnu.so",
    "package into the person's folder": "echo 'import os' > notes/__init__.py && mv notes shou2 && "
                                        "echo 'import os' > shou/__init__.py",
}


@pytest.mark.parametrize("form", list(SHOU_FORMS))
async def test_a_shou_module_the_program_makes_at_the_top_is_removed(sb: Sandbox, workspace: Path,
                                                                    form: str) -> None:
    (workspace / "shou").mkdir()  # the person's folder named shou: not a package; theirs to keep
    (workspace / "shou" / "plan.md").write_text("mine\n")
    (workspace / "notes").mkdir()
    (workspace / "shou.toml").write_text("[agent]\n")  # the workspace's settings: never taken for a module
    r = await sb.run(["bash", "-c", SHOU_FORMS[form]])
    left = sorted(p.name for p in workspace.iterdir() if p.name == "shou" or (p.name.startswith("shou.")
                  and p.name != "shou.toml"))
    assert left in (["shou"], []), (left, r.for_model())
    assert not (workspace / "shou" / "__init__.py").exists() and not (workspace / "shou").is_symlink()
    plan = workspace / ("shou-new" if "link" in form else "shou") / "plan.md"
    assert plan.read_text() == "mine\n" and (workspace / "shou.toml").exists(), r.for_model()
    assert "python -m shou" in (r.note or ""), r.note
    probe = subprocess.run([sys.executable, "-m", "shou", "--help"], cwd=workspace, capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0 and "Usage" in probe.stdout, probe.stderr[-2000:]


async def test_a_persons_file_named_shou_cannot_be_swapped_for_a_package(sb: Sandbox, workspace: Path) -> None:
    # Review 49, F2: with the person's launcher script `shou` at the top, shou/__init__.py was neither missing
    # (its way went through a file) nor there, so nothing kept the program from putting a package in its place.
    (workspace / "shou").write_text("#!/bin/sh\nexec python3 -m shou \"$@\"\n")
    r = await sb.run(["bash", "-c", "rm -f shou; mkdir shou && echo 'import os' > shou/__init__.py; "
                                    "mv shou shou-old; mkdir shou && echo 'import os' > shou/__init__.py; true"])
    assert (workspace / "shou").is_file(), r.for_model()
    assert (workspace / "shou").read_text().startswith("#!/bin/sh"), r.for_model()


async def test_a_link_named_shou_at_the_top_is_refused_not_swapped(sb: Sandbox, workspace: Path) -> None:
    # Review 49b, B4: the person's `shou -> bin/launcher` could be replaced by a package (a link cannot be bound
    # read-only as itself): the sandbox refuses to run there, as for any link among the host's start-up paths.
    from shou.errors import UserError

    (workspace / "bin").mkdir()
    (workspace / "bin" / "launcher").write_text("#!/bin/sh\n")
    (workspace / "shou").symlink_to("bin/launcher")
    with pytest.raises(UserError, match="symlink"):
        await sb.run(["bash", "-c", "rm shou && mkdir shou && echo 'import os' > shou/__init__.py"])
    assert (workspace / "shou").is_symlink()
