"""Sandboxes for code and shell commands: pick a backend, and check which ones work here."""

from __future__ import annotations

from pathlib import Path

from ..config import SANDBOX_BACKENDS
from ..errors import UserError
from .base import LANGUAGES, ExecResult, Limits, Sandbox

__all__ = ["BACKENDS", "LANGUAGES", "ExecResult", "Limits", "Sandbox", "diagnose", "get_sandbox"]

BACKENDS = SANDBOX_BACKENDS
_CACHE: dict[tuple[str, Path, Limits, str | None], Sandbox] = {}


def _availability(backend: str) -> tuple[bool, str]:
    if backend == "bubblewrap":
        from .bubblewrap import BubblewrapSandbox

        return BubblewrapSandbox.available()
    if backend == "docker":
        from .docker import DockerSandbox

        return DockerSandbox.available()
    from .local import LocalSandbox

    return LocalSandbox.available()


def get_sandbox(workspace: str | Path, backend: str = "auto", limits: Limits | None = None,
                image: str | None = None) -> Sandbox:
    """The sandbox for `workspace` (one per backend, workspace and limits, so session state persists).

    `auto` takes bubblewrap, then Docker; `local` (no isolation) is used only when asked for by name.
    `image` is the Docker image for every language (Docker only; default: one official image each).
    """
    if backend not in BACKENDS:
        raise UserError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    root = Path(workspace).resolve()
    limits = limits or Limits()
    if backend == "auto":
        reasons = []
        for candidate in ("bubblewrap", "docker"):
            ok, why = _availability(candidate)
            if ok:
                backend = candidate
                break
            reasons.append(f"{candidate}: {why}")
        else:
            raise UserError("no sandbox backend works here (" + "; ".join(reasons) + "). Fix one of them, "
                            "or run without isolation with --sandbox local (SHOU_SANDBOX=local)")
    key = (backend, root, limits, image)
    if key not in _CACHE:
        _CACHE[key] = _build(backend, root, limits, image)
    return _CACHE[key]


def _build(backend: str, root: Path, limits: Limits, image: str | None = None) -> Sandbox:
    if backend == "bubblewrap":
        from .bubblewrap import BubblewrapSandbox

        ok, why = BubblewrapSandbox.available()
        if not ok:
            raise UserError(f"the bubblewrap sandbox does not work here: {why}")
        return BubblewrapSandbox(root, limits)
    if backend == "docker":
        from .docker import DockerSandbox

        return DockerSandbox(root, limits, images=dict.fromkeys(("python", "bash", "node", "java"), image)
                             if image else None)
    from .local import LocalSandbox

    return LocalSandbox(root, limits)


def diagnose() -> list[tuple[str, bool, str]]:
    """(backend, works, why) for every backend, for `shou doctor`."""
    rows = []
    for backend in BACKENDS[1:]:
        try:
            ok, why = _availability(backend)
        except Exception as e:  # a broken optional dependency must not break the report
            ok, why = False, f"{type(e).__name__}: {e}"
        rows.append((backend, ok, why))
    return rows
