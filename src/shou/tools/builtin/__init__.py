"""The built-in tools, and which of them are installed.

Each entry names a module and the tools it defines. Optional ones (added by later parts: shell, code,
browser, web, memory) depend on extras; an entry whose imports fail is simply not offered.
"""

from __future__ import annotations

import importlib
import importlib.util

from ..base import Tool

# module, its tools, the packages it needs (looked up, not imported: the browser's Playwright takes 0.1-0.4 s
# to import and most runs never open a page).
BUILTINS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("shou.tools.builtin.files", ("read_file", "write_file", "edit_file", "list_files"), ()),
    ("shou.tools.builtin.calc", ("calculator",), ()),
    ("shou.tools.builtin.clock", ("current_time",), ()),
    ("shou.tools.builtin.shell", ("shell", "run_code"), ()),
    ("shou.tools.builtin.working_memory", ("working_memory",), ()),
    ("shou.tools.builtin.browser", ("browser",), ("playwright",)),
    ("shou.tools.builtin.web", ("web_fetch", "web_search"), ()),
    ("shou.tools.builtin.memory", ("save_memory", "search_memory"), ()),
]


def builtin_tools() -> list[Tool]:
    """Every built-in tool whose dependencies are installed, in a stable order."""
    tools: list[Tool] = []
    for module_name, names, needs in BUILTINS:
        if any(importlib.util.find_spec(n) is None for n in needs):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        tools.extend(getattr(module, n) for n in names)
    return tools
