"""The documentation's shape and the facts it copies from the code stay true: the README stays short and points
into docs/, every page is in the site's navigation, the settings table is the settings, and the API reference
names only what `shou` exports."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import yaml

import shou
from shou.settings import setting_fields

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's tags (`!relative`) read as plain strings: only its structure matters here."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def nav_pages() -> set[str]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)  # a SafeLoader: tags become None
    return {page for entry in config["nav"] for page in entry.values()}


def test_the_readme_is_under_150_lines_and_its_links_into_docs_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links, "the README points nowhere into docs/"
    for link in links:
        assert (ROOT / link).is_file(), link


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page() -> None:
    pages = {p.name for p in DOCS.glob("*.md")}
    assert nav_pages() == pages


def test_the_settings_table_lists_every_setting_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*?) \| .* \|$", (DOCS / "models.md").read_text(), re.M))
    fields = setting_fields()
    assert set(rows) == set(fields), "docs/models.md's table and shou/settings.py disagree on which settings exist"
    for name, field in fields.items():
        if field.default is dataclasses.MISSING:  # a computed default (the workspace) is said in words
            continue
        shown = rows[name].strip("`")
        want = "none" if field.default is None else "[]" if field.default == () else str(field.default).lower()
        assert shown.lower() == want, f"{name}: the table says {rows[name]}, the code {field.default!r}"


def test_the_api_reference_names_only_what_shou_exports() -> None:
    names = re.findall(r"^::: shou\.(\w+)$", (DOCS / "python.md").read_text(), re.M)
    assert {"Agent", "tool", "RunResult"} <= set(names)
    assert set(names) <= set(shou.__all__), set(names) - set(shou.__all__)
