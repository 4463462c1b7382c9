"""What `shou` exports: every name in `__all__` resolves, and what Agent's parameters take is there."""

from __future__ import annotations

import subprocess
import sys

import shou


def test_every_exported_name_resolves_and_is_listed() -> None:
    assert sorted(shou.__all__) == sorted(shou._EXPORTS)
    for name in shou.__all__:
        assert getattr(shou, name) is not None, name


def test_the_types_agent_parameters_need_are_exported() -> None:
    from shou.agent.approvals import Approver
    from shou.permissions import Policy
    from shou.pricing import PriceTable

    assert {"Policy", "Approver", "PriceTable"} <= set(shou.__all__)
    assert (shou.Policy, shou.Approver, shou.PriceTable) == (Policy, Approver, PriceTable)


def test_star_import_gives_them_and_import_stays_lazy() -> None:
    code = ("import sys, shou; assert 'shou.permissions' not in sys.modules; "
            "from shou import *; print(Policy.__name__, PriceTable.__name__, Approver is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Policy", "PriceTable", "True"]
