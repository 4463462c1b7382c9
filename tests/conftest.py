"""Fixtures every kind of test shares."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def deep_tmp() -> Iterator[Path]:
    """A folder for trees thousands of levels deep, outside pytest's own temporary folders.

    Python 3.11's `shutil.rmtree` recurses once a level, so pytest's clean-up of an older session's folders dies
    on such a tree when a test was killed before removing it, and takes the whole session with it. Here a
    leftover is only litter in the system's temporary folder; `rm -rf` removes it when the test ends.
    """
    folder = Path(tempfile.mkdtemp(prefix="shou-deep-"))
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)
