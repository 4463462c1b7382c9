"""Describing a function to a model: a docstring's summary and parameter texts, and a schema without the
titles pydantic adds (they only cost tokens). `@tool` (shou.tools.base) builds a tool's schema with these."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["clean_schema", "parse_docstring"]


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated `title`s, which only cost tokens, keeping property names intact."""

    def walk(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "title" and not in_properties and isinstance(v, str):
                    continue
                out[k] = walk(v, in_properties=k in ("properties", "$defs"))
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Params|Returns?|Raises|Yields|Examples?|Notes?):\s*$")
_GOOGLE_PARAM_RE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter descriptions.

    Understands Google style (`Args:` then `name (type): text`, continuation lines indented more) and
    Sphinx style (`:param name: text`).
    """
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent = 0
    for raw in doc.splitlines():
        line = raw.strip()
        m = _SPHINX_PARAM_RE.match(line)
        if m:
            current, section = m.group(1), "sphinx"
            params[current] = m.group(2).strip()
            continue
        if line.startswith(":") and section == "sphinx":
            current = None  # :returns: and friends end the parameter
            continue
        sm = _SECTION_RE.match(line)
        if sm:
            section = "args" if sm.group(1) in ("Args", "Arguments", "Parameters", "Params") else "other"
            current = None
            base_indent = -1
            continue
        if section == "args":
            if not line:
                current = None
                continue
            indent = len(raw) - len(raw.lstrip())
            if base_indent < 0:
                base_indent = indent
            pm = _GOOGLE_PARAM_RE.match(line)
            if pm and indent <= base_indent:
                current = pm.group(1).lstrip("*")
                params[current] = pm.group(2).strip()
            elif current:
                params[current] = (params[current] + " " + line).strip()
            continue
        if section == "sphinx" and current and line:
            params[current] = (params[current] + " " + line).strip()
            continue
        if section is None:
            summary.append(line)
    return "\n".join(summary).strip(), params
