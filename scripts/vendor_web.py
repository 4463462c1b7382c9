"""Vendor the web page's libraries: `npm ci` in web/, then copy the exact dist files into the package.

`shou serve`'s page (src/shou/serve/web/) renders Markdown with marked, sanitises it with DOMPurify and
highlights code with highlight.js (its common-languages build). They are served by shou itself, never from a
CDN, so the page works offline; this script is the one way they get there:

    python scripts/vendor_web.py          # npm ci (web/package-lock.json's versions), copy, record checksums
    python scripts/vendor_web.py --check  # npm ci, then fail if a vendored file differs from what it gives

It writes src/shou/serve/web/vendor/VERSIONS.json: each package's version and the lock file's integrity, and
each copied file's source and SHA-256. tests/unit/test_web_vendor.py checks the vendored files against it and
against the lock file (and against web/node_modules when `npm ci` ran there, as .ci/install does), so the
files cannot drift from the pinned versions unseen. axe-core (a devDependency) is for the page's tests only
and is not shipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
VENDOR = ROOT / "src" / "shou" / "serve" / "web" / "vendor"

# package -> [(file in the package, name in vendor/)]; each package's licence text goes along.
FILES: dict[str, list[tuple[str, str]]] = {
    "marked": [("lib/marked.esm.js", "marked.esm.js"), ("LICENSE", "LICENSE.marked.txt")],
    "dompurify": [("dist/purify.es.mjs", "purify.es.mjs"), ("LICENSE", "LICENSE.dompurify.txt")],
    "@highlightjs/cdn-assets": [("es/highlight.min.js", "highlight.min.js"), ("LICENSE", "LICENSE.highlightjs.txt")],
}
NOTE = ("Copied from npm packages by scripts/vendor_web.py (web/package-lock.json's versions); do not edit. "
        "Checked by tests/unit/test_web_vendor.py.")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_entry(lock: dict, package: str) -> dict:
    entry = lock["packages"].get(f"node_modules/{package}")
    if entry is None:
        raise SystemExit(f"{package} is not in web/package-lock.json")
    return entry


def manifest(lock: dict) -> dict:
    """What VERSIONS.json records: per package its version, integrity, licence and files with checksums."""
    packages = {}
    for package, files in FILES.items():
        entry = lock_entry(lock, package)
        source = WEB / "node_modules" / package
        installed = json.loads((source / "package.json").read_text(encoding="utf-8"))["version"]
        if installed != entry["version"]:
            raise SystemExit(f"web/node_modules has {package} {installed}, the lock file {entry['version']}: "
                             "run npm ci")
        packages[package] = {
            "version": entry["version"], "integrity": entry["integrity"], "license": entry.get("license", ""),
            "files": {dest: {"from": src, "sha256": sha256(source / src)} for src, dest in files},
        }
    return {"note": NOTE, "packages": packages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of copying; exit 1 on a difference")
    ap.add_argument("--no-install", action="store_true", help="use web/node_modules as it is (no npm ci)")
    args = ap.parse_args()
    if not args.no_install:
        subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=WEB, check=True)
    lock = json.loads((WEB / "package-lock.json").read_text(encoding="utf-8"))
    want = manifest(lock)
    if args.check:
        have = json.loads((VENDOR / "VERSIONS.json").read_text(encoding="utf-8"))
        bad = [f"{dest}" for p in want["packages"].values() for dest, f in p["files"].items()
               if not (VENDOR / dest).is_file() or sha256(VENDOR / dest) != f["sha256"]]
        if bad or have != want:
            print(f"vendored web files differ from web/package-lock.json's: {bad or 'VERSIONS.json'}", file=sys.stderr)
            return 1
        print("vendored web files match web/package-lock.json")
        return 0
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    VENDOR.mkdir(parents=True)
    for package, files in FILES.items():
        for src, dest in files:
            shutil.copyfile(WEB / "node_modules" / package / src, VENDOR / dest)
    (VENDOR / "VERSIONS.json").write_text(json.dumps(want, indent=2) + "\n", encoding="utf-8")
    print(f"vendored {sum(len(f) for f in FILES.values())} files into {VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
