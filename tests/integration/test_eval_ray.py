"""`shou eval` and `shou batch` on Ray, on clusters the tests start and stop themselves.

The acceptance run: a cluster of two nodes on this machine (`ray start --head`, then a second `ray start
--address` with CPUs of its own), 200 cases run with `--ray auto` (the address comes from `RAY_ADDRESS`) and
their sessions in PostgreSQL, and the second node's raylet killed with `kill -9` in the middle of the run.
Every case calls a tool whose side effect is a line in a ledger outside the workspaces; on the second node
that call then waits, so the kill lands while its calls are running, and the test waits for those ledger lines
(an event), not for time to pass. After the run: one result per case, each case's side effect happened once,
the calls the kill cut short were resumed (not run again) on the node that was left, and the pass rate is the
same suite's on this machine.

Every cluster process carries a marker variable in its environment; a test ends by killing, by pid, each
process that carries its marker, and checks none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import shou_env

pytest.importorskip("ray")

SRC = Path(__file__).resolve().parents[2] / "src"
HOST = "127.0.0.2"  # loopback, but not the spelling Ray rewrites to the machine's outward address
CASES = 200
MARK = "SHOU_TEST_RAY_CLUSTER"
RAY_CLI = str(Path(sys.executable).with_name("ray"))  # the `ray` of the Python running the tests

TOOLS = '''
import os
import threading

from shou import tool

@tool
def ledger(case: str) -> str:
    """Write the case id in the ledger (a side effect that must happen once).

    Args:
        case: the case id
    """
    node = os.environ.get("SHOU_TEST_NODE", "one")
    fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{case} {node} {os.getpid()}\\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    if node == "two":  # the second node's calls wait for its raylet's kill (which ends this process)
        threading.Event().wait()
    return f"ledgered {case}"
'''


def write_suite(folder: Path, n: int) -> Path:
    """`n` cases whose oracle calls `ledger` once, then answers; every fourth case's answer fails its check.
    The solution reads the conversation (`expect`), as a model does: a call that finished or was cut short
    is not made again, and a run resumed after the kill goes on to the answer."""
    path = folder / "suite.jsonl"
    with path.open("w") as f:
        for i in range(n):
            cid = f"c{i:03d}"
            answer = "nothing to say" if i % 4 == 0 else f"done {cid}"
            f.write(json.dumps({
                "id": cid, "task": f"Record case {cid} in the ledger.",
                "checks": [{"answer_contains": f"done {cid}"}],
                "solution": [{"expect": ["ledgered|interrupted"], "text": answer,
                              "otherwise": {"tool_calls": [{"name": "ledger", "arguments": {"case": cid}}]}}],
            }) + "\n")
    return path


def free_ports(n: int) -> list[int]:
    """`n` distinct ports nothing listens on now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(what: str, ready: Callable[[], bool], guard: float = 240.0) -> None:
    """Wait until `ready()`; `guard` seconds only bound a hang, they decide nothing."""
    deadline = time.monotonic() + guard
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {guard:.0f}s")
        time.sleep(0.05)


def marked(mark: str) -> list[int]:
    """The live processes of the cluster whose temp dir is `mark`: those whose environment carries
    `MARK=mark`, and those with a file under `mark` open (Ray's workers and agents rewrite their environment
    with their process titles, but keep their logs there open)."""
    needle, under = f"{MARK}={mark}".encode(), mark.rstrip("/") + "/"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # ended, waiting for its parent to reap it
            if needle in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0") or any(
                    os.readlink(fd.path).startswith(under) for fd in os.scandir(f"/proc/{entry}/fd")):
                found.append(int(entry))
        except OSError:  # gone meanwhile
            continue
    return found


def end_marked(mark: str) -> list[int]:
    """Kill every process carrying `mark` (SIGKILL: a test cluster has nothing to save, and Ray's daemons
    do not all heed SIGTERM); the pids there were."""
    there = marked(mark)
    while left := marked(mark):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for("the killed processes to end", lambda: not set(left) & set(marked(mark)), guard=30.0)
    return there


class Cluster:
    """A Ray cluster of `ray start` nodes on this machine, in a temp dir of its own (its path is the mark)."""

    def __init__(self) -> None:
        # Short: Ray's unix sockets live under it, and a socket's path has at most 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="shr", dir="/tmp"))
        self.port, *self.ports = free_ports(1 + 7 * 2)  # distinct: the head's, then seven for each node
        self.address = f"{HOST}:{self.port}"
        # Token authentication (Ray's default for new clusters) with a token of the cluster's own, given to its
        # nodes and its drivers in the environment: nothing is read from or written to ~/.ray.
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self.manager_ports: list[int] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        # No PYTHONPATH: the workers import the driver's shou from the job's runtime_env, as on a real cluster.
        env.update({MARK: str(self.root), "RAY_USAGE_STATS_ENABLED": "0", **self.auth, **extra})
        return env

    def start(self, cpus: int, **env: str) -> None:
        """Start the head (first call) or another node, with `cpus` CPUs and `env` for its workers."""
        manager, objects, agent, grpc, renv, metrics, dashboard = self.ports[:7]
        del self.ports[:7]
        argv = [RAY_CLI, "start", "--node-ip-address", HOST, "--num-cpus", str(cpus),
                "--node-manager-port", str(manager), "--object-manager-port", str(objects),
                "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(grpc),
                "--runtime-env-agent-port", str(renv), "--metrics-export-port", str(metrics),
                "--temp-dir", str(self.root / "ray"), "--object-store-memory", str(80 * 2**20),
                "--disable-usage-stats"]
        if not self.manager_ports:
            argv += ["--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--dashboard-port", str(dashboard)]
        else:
            argv += ["--address", self.address]
        done = subprocess.run(argv, env=self.env(**env), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        self.manager_ports.append(manager)

    def raylet(self, node: int) -> int:
        """The pid of node `node`'s raylet (0: the head)."""
        flag = f"--node_manager_port={self.manager_ports[node]}".encode()
        for pid in marked(str(self.root)):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if flag in argv and argv[0].endswith(b"/raylet"):
                return pid
        raise AssertionError(f"no raylet for node {node}")

    def stop(self) -> None:
        end_marked(str(self.root))
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()
    assert not marked(str(c.root)), "a process of the test's Ray cluster outlived it"


def run_shou(tmp_path: Path, args: list[str], **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shou", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=shou_env(tmp_path, None, PYTHONPATH=str(SRC), RAY_USAGE_STATS_ENABLED="0", **env))


def results(folder: Path) -> list[dict[str, Any]]:
    path = folder / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ledger_lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def tool_events(url: str, session: str) -> tuple[list[str], list[str]]:
    """A session's event types, and what its `ledger` calls were answered."""
    from shou.events import ToolCallFinished
    from shou.store.postgres import PostgresStore

    store = PostgresStore(url, None)
    try:
        rows = store.rows(session)
    finally:
        store.close()
    types = [event.type for _, event in rows]
    answers = [event.content for _, event in rows if isinstance(event, ToolCallFinished) and event.name == "ledger"]
    return types, answers


@pytest.mark.timeout(900)
def test_second_node_killed_mid_run(tmp_path: Path, postgres_url: str, cluster: Cluster) -> None:
    suite = write_suite(tmp_path, CASES)
    (tmp_path / "tools.py").write_text(TOOLS)
    common = ["eval", str(suite), "--model", "oracle", "--functions", "tools.py"]
    timeout = {"SHOU_TOOL_TIMEOUT": "3600"}  # forwarded to the workers: the second node's calls outwait the kill

    # The same suite on this machine, for the pass rate.
    here = run_shou(tmp_path, [*common, "--out", "here", "-j", "2"], LEDGER=str(tmp_path / "here.ledger"), **timeout)
    out, err = here.communicate(timeout=600)
    assert here.returncode == 0, out + err
    local = {r["case"]: r["outcome"] for r in results(tmp_path / "here")}
    assert len(local) == CASES and Counter(local.values()) == {"pass": CASES * 3 // 4, "fail": CASES // 4}

    ledger = tmp_path / "ray.ledger"
    cluster.start(1, LEDGER=str(ledger))
    cluster.start(2, LEDGER=str(ledger), SHOU_TEST_NODE="two")
    run = run_shou(tmp_path, [*common, "--out", "ray", "--store", postgres_url, "--ray", "auto"],
                   RAY_ADDRESS=cluster.address, **cluster.auth, **timeout)
    try:
        # Mid-run: results are coming, and both CPUs of the second node are inside a call.
        wait_for("results, and two calls running on the second node",
                 lambda: len(results(tmp_path / "ray")) >= 1
                 and sum(1 for line in ledger_lines(ledger) if line[1] == "two") >= 2)
        cut = {line[0]: int(line[2]) for line in ledger_lines(ledger) if line[1] == "two"}
        os.kill(cluster.raylet(1), signal.SIGKILL)
        out, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, out + err
    wait_for("the killed node's workers to end with their raylet",
             lambda: not any(Path(f"/proc/{pid}").exists() for pid in cut.values()), guard=60)

    # Exactly one result per case, and the pass rate of the run on this machine.
    got = results(tmp_path / "ray")
    assert sorted(r["case"] for r in got) == sorted(local)
    assert {r["case"]: r["outcome"] for r in got} == local
    # Each case's side effect happened once: the calls cut short were not run again.
    count = Counter(line[0] for line in ledger_lines(ledger))
    assert set(count) == set(local) and set(count.values()) == {1}, count.most_common(3)
    assert Counter(line[0] for line in ledger_lines(tmp_path / "here.ledger")) == count
    # The killed node's samples were resumed from their session logs on the node that was left.
    for case in cut:
        types, answers = tool_events(postgres_url, f"{case}@oracle#1")
        assert "run_resumed" in types, (case, types)
        assert len(answers) == 1 and answers[0].startswith("Error: interrupted"), (case, answers)
    for case in list(local)[:: CASES // 20]:
        types, answers = tool_events(postgres_url, f"{case}@oracle#1")
        assert types.count("tool_call_started") == 1, (case, types)


@pytest.mark.timeout(300)
def test_local_cluster_batch(tmp_path: Path) -> None:
    """`--ray local`: a cluster of -j CPUs started for the run and gone after it; a task that errors is a
    result (not retried)."""
    (tmp_path / "s.json").write_text(json.dumps([{"text": "42"}]))
    lines = [{"id": f"t{i}", "task": f"What is {i}+1?", "model": "scripted:s.json"} for i in range(8)]
    lines.append({"id": "broken", "task": "What?", "model": "scripted:missing.json"})
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    mark = tempfile.mkdtemp(prefix="shl", dir="/tmp")  # Ray's temp dir; short: Ray's sockets go under it
    run = run_shou(tmp_path, ["batch", "tasks.jsonl", "--out", "o", "-j", "2", "--ray", "local"],
                   RAY_TMPDIR=mark, **{MARK: mark}, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                   # a cluster on this machine alone: Ray then keeps to the loopback address
                   RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    try:
        out, err = run.communicate(timeout=240)
        wait_for("the local cluster to end with its run", lambda: not marked(mark), guard=30)
    finally:
        end_marked(mark)
        shutil.rmtree(mark, ignore_errors=True)
    assert run.returncode == 0, out + err
    got = {r["case"]: r for r in results(tmp_path / "o")}
    assert sorted(got) == sorted(x["id"] for x in lines)
    assert all(got[f"t{i}"]["answer"] == "42" and got[f"t{i}"]["outcome"] == "pass" for i in range(8))
    assert got["broken"]["outcome"] == "error" and "missing.json" in got["broken"]["error"]
    assert "--store postgresql://" not in err  # one machine: a retried sample finds its workspace


def test_warns_when_retries_cannot_resume(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a cluster, sessions kept in the workspaces (or a SQLite file) resume a retried sample only from
    shared storage: the run says so, and names the remedy; PostgreSQL needs no warning."""
    from shou.eval.ray_runner import _warn_unshared
    from shou.eval.sample import SampleEnv

    env = SampleEnv(tmp_path, lambda sample, ws: None)  # type: ignore[arg-type, return-value]
    for kind in (None, "sqlite", "postgresql"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="shou.eval"):
            _warn_unshared(env, kind)
        assert ("--store postgresql://" in caplog.text) == (kind != "postgresql"), kind


def test_environment_travels_with_its_store(postgres_url: str, tmp_path: Path) -> None:
    """The evaluation's environment pickles with its shared store as the URL that names it; a worker opens
    that store once for every sample it runs."""
    from shou.eval import ray_task
    from shou.eval.make import settings_maker
    from shou.eval.sample import SampleEnv
    from shou.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, None)
    try:
        env = SampleEnv(tmp_path, settings_maker({"max_steps": 3}, store=store), shared_store=True)
        packed = ray_task.pack_env(env)
    finally:
        store.close()
    assert packed.store_kind == "postgresql" and packed.cwd == os.getcwd()
    first = ray_task.unpack_env("t1", packed.data)
    assert ray_task.unpack_env("t1", b"not read again") is first
    again = ray_task.unpack_env("t2", packed.data)
    try:
        shared = [v for v in ray_task._stores.values() if isinstance(v, PostgresStore)]
        assert len(shared) == 1 and shared[0].url == postgres_url
        assert first.out == tmp_path and again is not first
    finally:
        for s in ray_task._stores.values():
            s.close()
        ray_task._stores.clear()
        ray_task._envs.clear()


def test_options_and_forwarded_environment() -> None:
    from shou.errors import UserError
    from shou.eval.ray_cluster import RayOptions, forwarded_environment, runtime_env

    options = RayOptions.from_environ({"SHOU_RAY_CPUS": "0.5", "SHOU_RAY_MEMORY": "1000000",
                                       "SHOU_RAY_MAX_RETRIES": "5"})
    assert options.task_options() == {"num_cpus": 0.5, "memory": 1000000, "max_retries": 5,
                                      "retry_exceptions": False}
    with pytest.raises(UserError):
        RayOptions.from_environ({"SHOU_RAY_CPUS": "many"})
    env = {"SHOU_MODEL": "m", "OPENAI_API_KEY": "k", "SHOU_WORKSPACE": "/w", "HOME": "/h", "SHOU_CONFIG_DIR": "/c"}
    assert forwarded_environment(env) == {"SHOU_MODEL": "m", "OPENAI_API_KEY": "k", "SHOU_CONFIG_DIR": "/c"}
    renv = runtime_env(RayOptions(), {"SHOU_MODEL": "m"})
    assert renv["env_vars"] == {"SHOU_MODEL": "m"}
    assert Path(renv["py_modules"][0]) == SRC / "shou"
    own = runtime_env(RayOptions(runtime_env={"env_vars": {"SHOU_MODEL": "x"}}), {"SHOU_MODEL": "m"})
    assert own == {"env_vars": {"SHOU_MODEL": "x"}}
