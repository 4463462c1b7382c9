"""What a Ray worker is sent to carry out a sample, and the task that does it there.

The evaluation's `SampleEnv` is pickled once (cloudpickle: its agent maker is a closure) and put in the
cluster's object store; each task gets a reference to it and the sample. A store the maker holds (the
`--store` every sample shares) travels as what names it, a PostgreSQL URL or a SQLite path, not as its open
connections: each worker process opens it once and keeps it for every sample it runs (`shared_store`: a
sample does not close it). Each worker also unpickles the environment once, not once per sample, keeps one
event loop for all its samples, and runs them in the driver's working folder when it has one, so that
relative paths (`--functions tools.py`) mean what they meant to the driver.

A budget travels with each task as what was left of it when the sample started (see `ray_runner`).
"""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from .sample import Sample, SampleEnv, run_sample

if TYPE_CHECKING:
    from ..agent.budget import Budget

__all__ = ["PackedEnv", "carry_out", "pack_env", "unpack_env"]

MAX_ENVS = 8  # evaluations a worker process keeps the environment of (a driver's runs one after another)

_envs: dict[str, SampleEnv] = {}  # this worker's environments, by the evaluation's token
_stores: dict[tuple[str, str, float | None], Any] = {}  # this worker's shared stores, by what names them
_runner: asyncio.Runner | None = None


@dataclass(frozen=True)
class PackedEnv:
    """A `SampleEnv` pickled for the workers, the kind of shared store it holds (`postgresql`, `sqlite`, or
    None when each sample uses its workspace's own) and the driver's working folder."""

    data: bytes
    store_kind: str | None
    cwd: str


def pack_env(env: SampleEnv) -> PackedEnv:
    """`env` as bytes a worker unpickles (`unpack_env`); a UserError when something in it cannot travel."""
    from ray import cloudpickle

    from ..store.basics import StoreBasics

    kinds: list[str] = []

    class Pickler(cloudpickle.CloudPickler):  # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, StoreBasics):
                kind, spec = _store_spec(obj)
                kinds.append(kind)
                return _worker_store, (kind, spec, getattr(obj, "retention_days", None))
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    try:
        Pickler(buffer, protocol=5).dump(env)
    except Exception as e:  # what cannot be pickled: an agent holding a live client, a lock, a socket
        raise UserError(f"the evaluation's agents cannot be sent to Ray workers ({type(e).__name__}: {e}); run "
                        "it with agents made from settings (shou eval, or run_suite without `agent`) or pass a "
                        "maker function that builds the agent in the worker") from None
    return PackedEnv(buffer.getvalue(), kinds[0] if kinds else None, os.getcwd())


def _store_spec(store: Any) -> tuple[str, str]:
    url = getattr(store, "url", None)
    if isinstance(url, str):
        return "postgresql", url
    path = getattr(store, "path", None)
    if path is not None:
        return "sqlite", str(path)
    raise UserError(f"a {type(store).__name__} cannot be shared by Ray workers: give --store postgresql://...")


def _worker_store(kind: str, spec: str, retention_days: float | None) -> Any:
    """The shared store `spec` names, opened once per worker process (every sample it runs writes there)."""
    key = (kind, spec, retention_days)
    store = _stores.get(key)
    if store is None:
        if kind == "postgresql":
            from ..store.postgres import PostgresStore

            store = PostgresStore(spec, retention_days)
        else:
            from ..store.sqlite import SQLiteStore

            store = SQLiteStore(spec, retention_days)
        _stores[key] = store
    return store


def unpack_env(token: str, data: bytes) -> SampleEnv:
    """The evaluation `token`'s environment, unpickled on this worker's first sample of it."""
    env = _envs.get(token)
    if env is None:
        from ray import cloudpickle

        env = cloudpickle.loads(data)
        if len(_envs) >= MAX_ENVS:
            _envs.pop(next(iter(_envs)))
        _envs[token] = env
    return env


def carry_out(token: str, packed: PackedEnv, sample: Sample, budgets: tuple[Budget, ...]) -> dict[str, Any]:
    """The Ray task: `sample` carried out in this worker (resumed from its session log when an attempt on a
    node that died left it open); its result line, which the driver alone writes."""
    if os.path.isdir(packed.cwd):  # relative paths (--functions tools.py) mean what they meant to the driver
        os.chdir(packed.cwd)
    env = unpack_env(token, packed.data)
    if budgets:
        env = replace(env, budgets=budgets)
    return _loop().run(run_sample(sample, env))


def _loop() -> asyncio.Runner:
    """This worker's event loop, kept from sample to sample (a worker runs one task at a time): a loop per
    sample would start and join a thread pool for each, a tenth of a scripted sample's time."""
    global _runner
    if _runner is None:
        _runner = asyncio.Runner()
    return _runner
