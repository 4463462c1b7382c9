"""glob_match: fnmatch's meaning without its backtracking."""

from __future__ import annotations

import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st

from shou.glob import glob_match


@settings(max_examples=3000)
@given(st.text(alphabet="ab*?[]!-^\\", max_size=9), st.text(alphabet="ab[]*-!^\\/", max_size=10))
def test_agrees_with_fnmatch(pattern: str, text: str) -> None:
    assert glob_match(text, pattern) == fnmatch.fnmatchcase(text, pattern)


def test_a_model_chosen_megabyte_cannot_stall_a_rule() -> None:
    # fnmatch's regex takes ~35 s here; the piecewise match answers at once.
    assert glob_match("a" * 1_000_000, "*a*a*a*a*a*b") is False
    assert glob_match("a" * 1_000_000 + "b", "*a*a*a*a*a*b") is True
