"""`/docs`: the OpenAPI document as a readable page, rendered on the server (no CDN, no script)."""

from __future__ import annotations

import html
import json
from typing import Any


def _schema_name(schema: dict[str, Any] | None) -> str:
    ref = (schema or {}).get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else ""


def docs_page(spec: dict[str, Any]) -> str:
    """An HTML page listing every operation, its body and answers, then every schema."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(spec['info']['title'])} API</title>",
           "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}"
           "code,pre{font-family:ui-monospace,monospace}pre{background:#f5f5f5;padding:.8em;overflow:auto}"
           ".op{border-top:1px solid #ddd;padding:.6em 0}.m{display:inline-block;min-width:4.5em;font-weight:bold}"
           "</style></head><body>",
           f"<h1>{e(spec['info']['title'])} API</h1><p>{e(spec['info'].get('description', ''))}</p>",
           "<p>The machine-readable document: <a href='/openapi.json'>/openapi.json</a>. Authenticate with "
           "<code>Authorization: Bearer TOKEN</code>.</p><h2>Operations</h2>"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            out.append(f"<div class='op'><span class='m'>{e(method.upper())}</span> <code>{e(path)}</code> "
                       f"&mdash; {e(op.get('summary', ''))}<ul>")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                name = _schema_name(body)
                out.append(f"<li>body: <a href='#{e(name)}'>{e(name)}</a></li>")
            for code, answer in op.get("responses", {}).items():
                content = answer.get("content", {})
                name = _schema_name(content.get("application/json", {}).get("schema"))
                link = f" <a href='#{e(name)}'>{e(name)}</a>" if name else ""
                out.append(f"<li>{e(code)}: {e(answer.get('description', ''))}{link}</li>")
            out.append("</ul></div>")
    out.append("<h2>Schemas</h2>")
    for name, schema in spec["components"]["schemas"].items():
        out.append(f"<h3 id='{e(name)}'>{e(name)}</h3><pre>{e(json.dumps(schema, indent=2))}</pre>")
    out.append("</body></html>")
    return "".join(out)
