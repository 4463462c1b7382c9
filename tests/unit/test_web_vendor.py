"""The web page's vendored libraries are exactly the files of the versions web/package-lock.json pins.

scripts/vendor_web.py copies them and records each one's source and SHA-256 in vendor/VERSIONS.json; these
checks make an edit of a vendored file, a version bumped in one place only, or a file left over fail here.
Where `npm ci` ran in web/ (.ci/install runs it), the copies are also compared with the installed packages.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
WEB = ROOT / "web"
VENDOR = ROOT / "src" / "shou" / "serve" / "web" / "vendor"
VERSIONS = json.loads((VENDOR / "VERSIONS.json").read_text(encoding="utf-8"))
LOCK = json.loads((WEB / "package-lock.json").read_text(encoding="utf-8"))
PACKAGE = json.loads((WEB / "package.json").read_text(encoding="utf-8"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("package", sorted(VERSIONS["packages"]))
def test_each_vendored_file_is_the_one_recorded(package: str) -> None:
    for dest, f in VERSIONS["packages"][package]["files"].items():
        assert sha256(VENDOR / dest) == f["sha256"], f"vendor/{dest} was changed: run scripts/vendor_web.py"


@pytest.mark.parametrize("package", sorted(VERSIONS["packages"]))
def test_the_recorded_versions_are_the_lock_files(package: str) -> None:
    entry = LOCK["packages"][f"node_modules/{package}"]
    recorded = VERSIONS["packages"][package]
    assert (recorded["version"], recorded["integrity"]) == (entry["version"], entry["integrity"])
    assert PACKAGE["dependencies"][package] == entry["version"], "pin exact versions in web/package.json"
    assert not entry.get("dev"), f"{package} is shipped: a dependency, not a devDependency"


def test_nothing_else_is_in_vendor() -> None:
    listed = {dest for p in VERSIONS["packages"].values() for dest in p["files"]} | {"VERSIONS.json"}
    assert {p.name for p in VENDOR.iterdir()} == listed
    assert set(PACKAGE["dependencies"]) == set(VERSIONS["packages"]), "every dependency is vendored, no other"
    assert all(any(d.startswith("LICENSE") for d in p["files"]) for p in VERSIONS["packages"].values())


def test_the_lock_file_names_no_registry_host() -> None:
    assert "resolved" not in json.dumps(LOCK) and "http" not in json.dumps(LOCK)


@pytest.mark.parametrize("package", sorted(VERSIONS["packages"]))
def test_the_copies_are_the_installed_packages_files(package: str) -> None:
    source = WEB / "node_modules" / package
    if not (source / "package.json").is_file():
        pytest.skip("web/node_modules is not installed (npm ci in web/, as .ci/install does)")
    installed = json.loads((source / "package.json").read_text(encoding="utf-8"))["version"]
    if installed != LOCK["packages"][f"node_modules/{package}"]["version"]:
        pytest.skip(f"web/node_modules has {package} {installed}, not the lock file's: run npm ci")
    for dest, f in VERSIONS["packages"][package]["files"].items():
        assert sha256(source / f["from"]) == f["sha256"], f"vendor/{dest} is not {package}'s {f['from']}"
