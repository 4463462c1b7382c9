"""The README's two commands stay true: CI runs its test command, and its run command's files exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, re.S)[:2]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, test = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, f"{test!r} is not a line of .ci/run"
    assert "set -euo pipefail" in ci


def test_readme_run_command_installs_the_local_model_and_runs_a_task() -> None:
    install_and_run, _ = readme_commands()
    assert install_and_run.startswith("pip install -e '.[local]' && shou run ")
    text = (ROOT / "README.md").read_text()
    script = re.search(r"scripted:(\S+)", text)  # the model-free demo the README mentions exists
    assert script and (ROOT / script.group(1)).is_file()
