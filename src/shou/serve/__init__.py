"""`shou serve`: agents over HTTP (shou.serve.app), on a run queue any number of replicas share
(shou.serve.jobs, shou.serve.runner), with event streams that resume on any replica (shou.serve.stream)."""

from __future__ import annotations

from ..store.spec import open_store

__all__ = ["open_store"]
