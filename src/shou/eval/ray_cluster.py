"""The Ray cluster an evaluation runs on (`--ray ADDRESS`): how the driver joins it, what each sample asks of
it, and the runtime_env that makes its workers run the driver's own shou.

`ADDRESS` is `auto` (the cluster `RAY_ADDRESS` names, else the one `ray start` left on this machine), `local`
(a cluster of `-j` CPUs started here for the run, stopped at its end) or `HOST:PORT` (a cluster's GCS).
Nothing shou-specific has to be on the cluster beyond shou's dependencies: by default the driver's shou
package is shipped to the workers as a runtime_env `py_modules` (so a driver and a cluster can never run two
versions of it), and the environment variables shou's settings and providers read (`SHOU_MODEL`,
`OPENAI_API_KEY`, ...) are passed to the workers as runtime_env `env_vars`. Ray keeps a job's runtime_env in
its GCS: whoever operates the cluster can read those keys. What a real cluster needs:
- every node: Python and `pip install 'shou[ray]'` (plus `shou[serve]` for `--store postgresql://...`, and
  the extras the cases' tools need), or a `SHOU_RAY_RUNTIME_ENV` whose `pip` list installs them;
- the results folder (`--out`), the suite's fixture folders and `--functions` files at the same paths on
  every node: on shared storage, or samples retried elsewhere start over (see `sample.py`);
- `--store postgresql://...` that every node reaches, so a retried sample resumes from its session log.

The environment can change what each sample asks for (see `RayOptions.from_environ`):
`SHOU_RAY_CPUS` (CPUs per sample, default 1; 0.25 lets four model-bound samples share a CPU),
`SHOU_RAY_MEMORY` (bytes of memory per sample, default none), `SHOU_RAY_MAX_RETRIES` (times a sample is
run again when its worker or node dies, default 3) and `SHOU_RAY_RUNTIME_ENV` (a JSON runtime_env used
instead of shipping the driver's shou; `{}` uses the shou installed on the cluster).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["RayOptions", "connect", "forwarded_environment", "import_ray", "runtime_env"]

LOCAL = ("local", "")  # run_suite's docstring has always called "" a local cluster too


@dataclass(frozen=True)
class RayOptions:
    """What each sample's task asks of the cluster: `cpus` and `memory` (bytes) reserved while it runs, how
    many times it is run again when its worker or node dies (`max_retries`), and the runtime_env its workers
    get (None: the driver's shou, shipped as `py_modules`)."""

    cpus: float = 1.0
    memory: int | None = None
    max_retries: int = 3
    runtime_env: Mapping[str, Any] | None = field(default=None)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RayOptions:
        """The options `SHOU_RAY_CPUS`, `SHOU_RAY_MEMORY`, `SHOU_RAY_MAX_RETRIES` and `SHOU_RAY_RUNTIME_ENV`
        give (the defaults for those not set)."""
        env = os.environ if environ is None else environ
        try:
            cpus = float(env.get("SHOU_RAY_CPUS", "1"))
            memory = int(env["SHOU_RAY_MEMORY"]) if env.get("SHOU_RAY_MEMORY") else None
            retries = int(env.get("SHOU_RAY_MAX_RETRIES", "3"))
        except ValueError as e:
            raise UserError(f"SHOU_RAY_CPUS, SHOU_RAY_MEMORY and SHOU_RAY_MAX_RETRIES must be numbers: {e}") from None
        if cpus < 0 or retries < 0 or (memory is not None and memory <= 0):
            raise UserError("SHOU_RAY_CPUS and SHOU_RAY_MAX_RETRIES must not be negative, SHOU_RAY_MEMORY positive")
        renv: Mapping[str, Any] | None = None
        if env.get("SHOU_RAY_RUNTIME_ENV"):
            try:
                renv = json.loads(env["SHOU_RAY_RUNTIME_ENV"])
            except ValueError as e:
                raise UserError(f"SHOU_RAY_RUNTIME_ENV is not JSON: {e}") from None
            if not isinstance(renv, dict):
                raise UserError("SHOU_RAY_RUNTIME_ENV must be a JSON object (a Ray runtime_env)")
        return cls(cpus, memory, retries, renv)

    def task_options(self) -> dict[str, Any]:
        """The `.options()` of each sample's task. Ordinary exceptions are not retried: a sample that errors
        is a result (run_sample makes one), and one that raises met a store or disk failure that running it
        again elsewhere would meet too."""
        options: dict[str, Any] = {"num_cpus": self.cpus, "max_retries": self.max_retries,
                                   "retry_exceptions": False}
        if self.memory is not None:
            options["memory"] = self.memory
        return options


def import_ray() -> Any:
    """The `ray` module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'shou[ray]'") from None
    return ray


def forwarded_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The driver's variables that shou's settings and providers read (`SHOU_*` settings, provider keys and
    base URLs, `SHOU_CONFIG_DIR`): workers are started by the cluster's raylets, not by the driver, so they
    would otherwise make agents from another configuration than the one the run was started with."""
    from ..config import PROVIDERS
    from ..settings import env_names

    env = os.environ if environ is None else environ
    names = set(env_names().values()) | {"SHOU_CONFIG_DIR"}
    for provider in PROVIDERS.values():
        names |= {n for n in (provider.key_env, provider.base_url_env) if n}
    names.discard("SHOU_WORKSPACE")  # each sample's workspace is its own (a flag, which wins anyway)
    return {name: env[name] for name in sorted(names) if name in env}


def runtime_env(options: RayOptions, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The job's runtime_env: the driver's shou package (unless `options` gives another runtime_env) and its
    forwarded environment (variables the given runtime_env sets win)."""
    if options.runtime_env is not None:
        renv = dict(options.runtime_env)
    else:
        package = Path(__file__).resolve().parent.parent  # .../shou: what `import shou` gives the workers
        renv = {"py_modules": [str(package)], "excludes": ["__pycache__", "*.pyc"]}
    renv["env_vars"] = {**forwarded_environment(environ), **dict(renv.get("env_vars") or {})}
    return renv


def connect(ray: Any, address: str, jobs: int, options: RayOptions) -> bool:
    """Join the cluster `address` names (see the module's docstring); whether this call connected (and so
    must disconnect at the end). A driver that called `ray.init()` itself keeps its own connection."""
    if ray.is_initialized():
        return False
    common: dict[str, Any] = {"runtime_env": runtime_env(options), "logging_level": logging.WARNING,
                              # workers' output stays in the cluster's logs: the driver's terminal shows progress
                              "log_to_driver": False}
    try:
        if address in LOCAL:
            ray.init(address="local", num_cpus=jobs, include_dashboard=False, **common)
        else:
            ray.init(address=address, **common)  # "auto" honours RAY_ADDRESS; an explicit address wins over it
    except ConnectionError as e:
        raise UserError(f"no Ray cluster at --ray {address}: {e}") from None
    return True
