"""A file of `shou serve` tokens must be its owner's alone, like an ssh key (shou.serve.auth)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shou.errors import UserError
from shou.serve.auth import Tokens


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    tf = tmp_path / "tok"
    tf.write_text("T0kenFileValue-ABCDEFGH1234\n")
    tf.chmod(0o644)
    with pytest.raises(UserError, match="chmod 600"):
        Tokens.local(tf)
    with pytest.raises(UserError, match="group or others"):
        Tokens.load(tf)
    tf.chmod(0o600)
    assert Tokens.local(tf)[1] == "T0kenFileValue-ABCDEFGH1234"


def test_a_token_file_behind_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("T0kenFileValue-ABCDEFGH1234 alice\n")
    real.chmod(0o600)
    os.symlink(real, tmp_path / "link")
    with pytest.raises(UserError, match="symlink"):
        Tokens.load(tmp_path / "link")
    assert Tokens.load(real).user_of("Bearer T0kenFileValue-ABCDEFGH1234") == "alice"
