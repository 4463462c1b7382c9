"""DockerSandbox: the container settings for each language, limit clamping, the create -> start -> wait ->
logs -> remove flow against a fake engine (timeout, cancellation, out of memory, spilled output), and real
runs when a Docker engine answers (skipped, with the reason, when none does)."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shou.errors import UserError
from shou.sandbox.base import Limits
from shou.sandbox.docker import DEFAULT_IMAGES, DockerSandbox

from ..fixtures.needs import need

MiB = 1024 * 1024


class FakeAPIError(Exception):
    """Like docker.errors.APIError: carries the HTTP status."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"{status_code} from the engine")
        self.status_code = status_code


class FakeContainer:
    """One container of the fake engine: runs at once, or hangs until killed or removed."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.exited = threading.Event()
        self.killed = False
        self.attrs: dict[str, Any] = {}

    def start(self) -> None:
        self.engine.calls.append("start")
        if not self.engine.hang:
            self.exited.set()

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        self.engine.calls.append("wait")
        if not self.exited.wait(timeout):
            raise TimeoutError("read timed out")
        return {"StatusCode": 137 if self.killed else self.engine.status, "Error": None}

    def kill(self) -> None:
        self.engine.calls.append("kill")
        self.killed = True
        self.exited.set()

    def reload(self) -> None:
        self.engine.calls.append("reload")
        self.attrs = {"State": {"OOMKilled": self.engine.oom, "ExitCode": self.engine.status}}

    def logs(self, *, stdout: bool, stderr: bool, stream: bool, follow: bool) -> Any:
        assert stdout != stderr, "each stream is read on its own"
        assert stream, "logs are streamed so memory stays bounded"
        self.engine.calls.append("logs:stdout" if stdout else "logs:stderr")
        return iter(list(self.engine.stdout if stdout else self.engine.stderr))

    def remove(self, *, force: bool = False, v: bool = False) -> None:
        self.engine.calls.append(f"remove(force={force})")
        self.exited.set()


class FakeEngine:
    """Stands in for docker.DockerClient at the API boundary: records every call, in order."""

    def __init__(self, *, status: int = 0, stdout: tuple[bytes, ...] = (b"hi\n",), stderr: tuple[bytes, ...] = (),
                 oom: bool = False, hang: bool = False, create_errors: tuple[int, ...] = (),
                 create_gate: threading.Event | None = None) -> None:
        self.status, self.stdout, self.stderr, self.oom, self.hang = status, stdout, stderr, oom, hang
        self.create_errors = list(create_errors)
        self.create_gate = create_gate
        self.create_entered = threading.Event()
        self.calls: list[str] = []
        self.created: list[dict[str, Any]] = []
        self.code: dict[str, bytes] = {}  # what /code held when the container was created
        self.code_modes: dict[str, int] = {}
        self.containers = SimpleNamespace(create=self._create)
        self.images = SimpleNamespace(pull=lambda image: self.calls.append(f"pull {image}"))

    def _create(self, **kwargs: Any) -> FakeContainer:
        self.create_entered.set()
        if self.create_gate is not None:
            assert self.create_gate.wait(10)
        self.calls.append("create")
        if self.create_errors:
            raise FakeAPIError(self.create_errors.pop(0))
        self.created.append(kwargs)
        code_dir = next(Path(host) for host, spec in kwargs["volumes"].items() if spec["bind"] == "/code")
        if not code_dir.exists():  # a cancelled run has cleaned up already
            return FakeContainer(self)
        self.code_modes["."] = stat.S_IMODE(code_dir.stat().st_mode)
        for path in code_dir.rglob("*"):
            name = path.relative_to(code_dir).as_posix()
            self.code_modes[name] = stat.S_IMODE(path.stat().st_mode)
            if path.is_file():
                self.code[name] = path.read_bytes()
        return FakeContainer(self)


async def until(condition: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never came true"
        await asyncio.sleep(0.01)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


LIMITS = Limits(timeout=20, memory_mb=256, cpu_seconds=7, processes=32, file_size_mb=10)
ROOT = os.geteuid() == 0


def expected_user(ws: Path) -> str:
    """Never root: as root the sandbox uid, otherwise the workspace's owner (issue 28)."""
    from shou.sandbox.bubblewrap import SANDBOX_UID

    owner = os.stat(ws)
    return f"{SANDBOX_UID}:{SANDBOX_UID}" if ROOT else f"{owner.st_uid}:{owner.st_gid}"


def check_workspace_source(host: str, ws: Path) -> None:
    """The folder bound at /workspace: as root, the idmapped view of `ws` under /run/shou; else `ws`."""
    if ROOT:
        assert host.startswith("/run/shou/") and host.endswith("/ws"), host
    else:
        assert host == str(ws.resolve())


def check_security(cfg: dict[str, Any]) -> None:
    import json

    assert cfg["cap_drop"] == ["ALL"] and cfg["security_opt"][0] == "no-new-privileges"
    (seccomp,) = [o for o in cfg["security_opt"] if o.startswith("seccomp=")]
    profile = json.loads(seccomp.removeprefix("seccomp="))
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"  # an allow-list, replacing the engine's default


# --- the container settings ---------------------------------------------------------------------------------

async def test_settings_files_are_read_only_and_links_never_bound(ws: Path, tmp_path: Path) -> None:
    (ws / "shou.toml").write_text("max_steps = 3\n")
    (tmp_path / "shadow").write_text("secret")
    (ws / ".env").symlink_to(tmp_path / "shadow")  # the engine would follow it: never bind it
    engine = FakeEngine()
    await DockerSandbox(ws, LIMITS, client=engine).run(["true"])
    (cfg,) = engine.created
    binds = {spec["bind"]: (host, spec["mode"]) for host, spec in cfg["volumes"].items()}
    # Bound from a pinned clone (root) or a private copy: never by a path in the workspace, which a
    # parallel call could swap for a link before the engine resolves it.
    source, mode = binds["/workspace/shou.toml"]
    assert not source.startswith(binds["/workspace"][0] + "/") and not source.startswith(str(ws) + "/")
    assert mode == ("rw" if os.geteuid() == 0 else "ro")  # as root the mount itself is read-only
    assert "/workspace/.env" not in binds and (ws / ".shou").is_dir() and not (ws / ".shou").is_symlink()


@pytest.mark.parametrize(("language", "image", "runtime", "file"), [
    ("python", "python:3.12-slim", "python3", "main.py"),
    ("bash", "python:3.12-slim", "bash", "main.sh"),
    ("node", "node:20-slim", "node", "main.js"),
    ("java", "eclipse-temurin:17-jdk", "java", "Main.java"),
])
async def test_each_language_gets_its_image_and_every_limit(ws: Path, language: str, image: str, runtime: str,
                                                           file: str) -> None:
    engine = FakeEngine()
    sandbox = DockerSandbox(ws, LIMITS, client=engine)
    await sandbox.run_code(language, "some code")
    (cfg,) = engine.created
    assert cfg["image"] == image
    assert cfg["entrypoint"] == [runtime] and cfg["command"][-1] == f"/code/{file}"
    assert engine.code == {file: b"some code"}
    assert cfg["mem_limit"] == 256 * MiB and cfg["memswap_limit"] == 256 * MiB
    assert cfg["nano_cpus"] == 1_000_000_000
    assert cfg["pids_limit"] == 32 + 1  # and docker-init
    assert cfg["init"] is True
    assert cfg["network_disabled"] is True and cfg["network_mode"] == "none"
    assert cfg["read_only"] is True
    uid, gid = expected_user(ws).split(":")
    assert cfg["tmpfs"] == {"/tmp": f"rw,nosuid,nodev,size=10m,mode=1777,uid={uid},gid={gid}",
                            "/workspace/.shou": "ro,nosuid,nodev,size=64k"}  # shou's state hidden
    check_security(cfg)
    assert cfg["user"] == expected_user(ws)
    assert cfg["working_dir"] == "/workspace"
    binds = {spec["bind"]: (host, spec["mode"]) for host, spec in cfg["volumes"].items()}
    check_workspace_source(binds["/workspace"][0], ws)
    assert binds["/workspace"][1] == "rw"
    assert binds["/code"][1] == "ro" and not os.path.exists(binds["/code"][0])  # removed after the run
    assert cfg["ulimits"] == [
        {"name": "fsize", "soft": 10 * MiB, "hard": 10 * MiB},
        {"name": "core", "soft": 0, "hard": 0},
        {"name": "cpu", "soft": 7, "hard": 8},
    ]
    assert cfg["auto_remove"] is False and cfg["labels"] == {"shou": "1"}


async def test_images_and_user_can_be_overridden(ws: Path) -> None:
    engine = FakeEngine()
    sandbox = DockerSandbox(ws, LIMITS, images={"python": "mine/py:1"}, user="1000:1000", client=engine)
    await sandbox.run_code("py", "print(1)")
    await sandbox.run_code("node", "1")
    await sandbox.run(["ls"])
    assert [c["image"] for c in engine.created] == ["mine/py:1", DEFAULT_IMAGES["node"], DEFAULT_IMAGES["bash"]]
    assert {c["user"] for c in engine.created} == {"1000:1000"}


async def test_network_only_when_both_the_sandbox_and_the_call_allow_it(ws: Path) -> None:
    engine = FakeEngine()
    await DockerSandbox(ws, LIMITS.with_(network=True), client=engine).run(["true"])
    await DockerSandbox(ws, LIMITS.with_(network=True), client=engine).run(["true"], limits=Limits(network=False))
    await DockerSandbox(ws, LIMITS, client=engine).run(["true"], limits=Limits(network=True))
    on, off_by_call, off_by_sandbox = engine.created
    assert on["network_disabled"] is False and on["network_mode"] == "bridge"
    for cfg in (off_by_call, off_by_sandbox):
        assert cfg["network_disabled"] is True and cfg["network_mode"] == "none"


async def test_a_call_cannot_exceed_the_sandbox_limits(ws: Path) -> None:
    engine = FakeEngine()
    sandbox = DockerSandbox(ws, Limits(memory_mb=256, processes=16, file_size_mb=8), client=engine)
    greedy = Limits(memory_mb=8192, processes=4096, file_size_mb=4096, cpu_seconds=10**6)
    await sandbox.run(["true"], limits=greedy)
    await sandbox.run_code("java", "class Main {}", limits=greedy)
    plain, java = engine.created
    assert plain["mem_limit"] == plain["memswap_limit"] == 256 * MiB
    assert plain["pids_limit"] == 17
    assert plain["ulimits"][0] == {"name": "fsize", "soft": 8 * MiB, "hard": 8 * MiB}
    assert "-Xmx128m" in java["command"]  # the heap follows the clamped memory, not the asked-for one


def test_config_is_accepted_by_the_sdk(ws: Path, tmp_path: Path) -> None:
    docker = pytest.importorskip("docker")
    from docker.models.containers import _create_container_args

    cfg = DockerSandbox(ws, LIMITS).container_config(["python3", "-u", "/code/main.py"], LIMITS, tmp_path)
    args = _create_container_args({**cfg, "version": "1.43"})  # raises on any kwarg create() would reject
    body = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.43").create_container_config(**args)
    host = body["HostConfig"]
    assert body["Entrypoint"] == ["python3"] and body["Cmd"] == ["-u", "/code/main.py"]
    assert body["User"] == expected_user(ws) and body["WorkingDir"] == "/workspace"
    assert body["NetworkDisabled"] is True
    assert host["Memory"] == host["MemorySwap"] == 256 * MiB and host["NanoCpus"] == 10**9 and host["PidsLimit"] == 33
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"] and host["NetworkMode"] == "none"
    (workspace_bind,) = [b for b in host["Binds"] if b.endswith(":/workspace:rw")]
    check_workspace_source(workspace_bind.removesuffix(":/workspace:rw"), ws)
    assert sorted(host["Binds"]) == sorted([workspace_bind, f"{tmp_path}:/code:ro"])
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == {
        "fsize": (10 * MiB, 10 * MiB), "core": (0, 0), "cpu": (7, 8)}
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "32m", "max-file": "2"}}
    uid, gid = expected_user(ws).split(":")
    assert host["SecurityOpt"][0] == "no-new-privileges" and host["SecurityOpt"][1].startswith("seccomp={")
    assert host["Tmpfs"] == {"/tmp": f"rw,nosuid,nodev,size=10m,mode=1777,uid={uid},gid={gid}",
                             "/workspace/.shou": "ro,nosuid,nodev,size=64k"} and host["Init"] is True


def test_empty_argv_is_refused(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="argv is empty"):
        DockerSandbox(ws).container_config([], LIMITS, tmp_path)


# --- the run flow, against the fake engine -------------------------------------------------------------------

async def test_create_start_wait_logs_remove(ws: Path) -> None:
    engine = FakeEngine(status=3, stdout=(b"out", b"put\n"), stderr=(b"warn\n",))
    result = await DockerSandbox(ws, LIMITS, client=engine).run(["prog"])
    assert engine.calls == ["create", "start", "wait", "reload", "logs:stdout", "logs:stderr", "remove(force=True)"]
    assert (result.stdout, result.stderr, result.exit_code, result.reason) == ("output\n", "warn\n", 3, "exit")
    assert result.duration >= 0 and result.output_path is None


async def test_stdin_and_files_arrive_readable_under_code(ws: Path) -> None:
    engine = FakeEngine()
    old_umask = os.umask(0o077)  # a strict umask must not lock out the container's user
    try:
        await DockerSandbox(ws, LIMITS, client=engine).run(["cat"], stdin=b"hello", files={"lib/util.py": b"x = 1"})
    finally:
        os.umask(old_umask)
    (cfg,) = engine.created
    assert cfg["entrypoint"] == ["/bin/sh"]
    assert cfg["command"] == ["-c", 'exec "$@" < /code/.shou-stdin', "sh", "cat"]
    assert engine.code == {".shou-stdin": b"hello", "lib/util.py": b"x = 1"}
    assert engine.code_modes == {".": 0o755, ".shou-stdin": 0o644, "lib": 0o755, "lib/util.py": 0o644}


async def test_file_names_must_stay_under_code(ws: Path) -> None:
    engine = FakeEngine()
    for bad in ("../escape.py", "/etc/passwd"):
        with pytest.raises(UserError, match="relative path under /code"):
            await DockerSandbox(ws, LIMITS, client=engine).run(["true"], files={bad: b""})
    assert engine.calls == []


async def test_timeout_kills_then_reads_logs_and_removes(ws: Path) -> None:
    engine = FakeEngine(hang=True, stdout=(b"partial\n",))
    started = time.monotonic()
    result = await DockerSandbox(ws, LIMITS, client=engine).run(["sleep", "100"], limits=Limits(timeout=0.3))
    # The fake engine never ends the container by itself: only the 0.3 s timeout ends the run this soon.
    assert time.monotonic() - started < 30
    assert result.reason == "timeout" and result.exit_code is None and result.stdout == "partial\n"
    assert 0.3 <= result.duration < 30
    assert engine.calls == ["create", "start", "wait", "kill", "reload", "logs:stdout", "logs:stderr",
                            "remove(force=True)"]


async def test_cancellation_removes_the_running_container(ws: Path) -> None:
    engine = FakeEngine(hang=True)
    task = asyncio.create_task(DockerSandbox(ws, LIMITS, client=engine).run(["sleep", "100"]))
    await until(lambda: "wait" in engine.calls)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.calls[-1] == "remove(force=True)"  # done before the cancellation surfaced
    code_dir = next(h for h, s in engine.created[0]["volumes"].items() if s["bind"] == "/code")
    assert not os.path.exists(code_dir)


async def test_cancellation_during_create_removes_the_container_once_made(ws: Path) -> None:
    gate = threading.Event()
    engine = FakeEngine(create_gate=gate)
    task = asyncio.create_task(DockerSandbox(ws, LIMITS, client=engine).run(["true"]))
    await until(engine.create_entered.is_set)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()  # the engine finishes creating it after all
    await until(lambda: "remove(force=True)" in engine.calls)
    assert "start" not in engine.calls


@pytest.mark.parametrize(("status", "oom", "stderr", "reason"), [
    (137, True, b"", "memory"),
    (1, False, b"Traceback ...\nMemoryError\n", "memory"),
    (152, False, b"", "cpu"),
    (137, False, b"", "exit"),
    (1, False, b"ValueError\n", "exit"),
])
async def test_exit_reason(ws: Path, status: int, oom: bool, stderr: bytes, reason: str) -> None:
    engine = FakeEngine(status=status, oom=oom, stderr=(stderr,))
    result = await DockerSandbox(ws, LIMITS, client=engine).run(["prog"])
    assert (result.reason, result.exit_code) == (reason, status)


async def test_large_output_is_capped_in_memory_and_spilled_to_the_workspace(ws: Path) -> None:
    chunks = tuple(bytes([65 + i % 26]) * 10_000 for i in range(30))
    engine = FakeEngine(stdout=chunks)
    result = await DockerSandbox(ws, LIMITS, client=engine).run(["prog"])
    assert result.stdout_omitted == 300_000 - 64_000 and "bytes omitted" in result.stdout
    assert result.output_path is not None and result.output_path.startswith(".shou/outputs/docker-")
    assert (ws / result.output_path).read_bytes() == b"".join(chunks)
    assert result.note == ""


async def test_a_missing_image_is_pulled_once(ws: Path) -> None:
    engine = FakeEngine(create_errors=(404,))
    result = await DockerSandbox(ws, LIMITS, client=engine).run_code("node", "1")
    assert engine.calls[:4] == ["create", "pull node:20-slim", "create", "start"]
    assert result.ok


async def test_other_engine_errors_propagate_without_a_pull(ws: Path) -> None:
    engine = FakeEngine(create_errors=(500,))
    with pytest.raises(FakeAPIError):
        await DockerSandbox(ws, LIMITS, client=engine).run(["true"])
    assert engine.calls == ["create"]


# --- without an engine or the SDK --------------------------------------------------------------------------

def _point_at_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    host = f"unix://{tmp_path}/no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    return host


def test_available_says_why_not_when_no_engine_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("docker")
    host = _point_at_nothing(monkeypatch, tmp_path)
    assert DockerSandbox.available() == (False, f"no Docker engine answers at {host}")


def test_available_names_the_install_when_the_sdk_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # makes `import docker` fail
    ok, why = DockerSandbox.available()
    assert not ok and "pip install 'shou[docker]'" in why


async def test_run_without_the_sdk_names_the_install(monkeypatch: pytest.MonkeyPatch, ws: Path) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)
    with pytest.raises(UserError, match=r"pip install 'shou\[docker\]'"):
        await DockerSandbox(ws).run(["true"])


async def test_run_without_an_engine_says_so(monkeypatch: pytest.MonkeyPatch, ws: Path, tmp_path: Path) -> None:
    pytest.importorskip("docker")
    _point_at_nothing(monkeypatch, tmp_path)
    with pytest.raises(UserError, match="no Docker engine answers"):
        await DockerSandbox(ws).run(["true"])


# --- a real engine -------------------------------------------------------------------------------------------

ENGINE_IMAGE = os.environ.get("SHOU_DOCKER_IMAGE", "shou-sandbox:local")  # built by .ci/docker-image


@pytest.fixture
def engine_sandbox(ws: Path) -> DockerSandbox:
    ok, why = DockerSandbox.available()
    need(ok, f"a Docker engine (.ci/install starts one): {why}")
    # The default user: the workspace's owner, who may write it.
    return DockerSandbox(ws, Limits(timeout=60, memory_mb=256), images=dict.fromkeys(DEFAULT_IMAGES, ENGINE_IMAGE))


@pytest.mark.timeout(900)
class TestWithEngine:
    async def test_python_prints_a_computed_result(self, engine_sandbox: DockerSandbox) -> None:
        result = await engine_sandbox.run_code("python", "print(sum(i * i for i in range(1000)))")
        assert result.ok, result.for_model()
        assert result.stdout.strip() == "332833500"

    async def test_timeout(self, engine_sandbox: DockerSandbox) -> None:
        result = await engine_sandbox.run_code("python", "import time; time.sleep(60)", limits=Limits(timeout=3))
        assert result.reason == "timeout" and result.duration < 30

    async def test_network_is_off(self, engine_sandbox: DockerSandbox) -> None:
        code = ("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    print('open')\n"
                "except OSError:\n    print('blocked')\n")
        result = await engine_sandbox.run_code("python", code)
        assert result.stdout.strip() == "blocked", result.for_model()

    async def test_root_is_read_only_but_tmp_and_workspace_are_writable(self, engine_sandbox: DockerSandbox) -> None:
        code = ("import os\nfor p in ('/etc/x', '/tmp/x', '/workspace/x'):\n    try:\n        open(p, 'w').close()\n"
                "        print(p, 'ok')\n    except OSError:\n        print(p, 'no')\n")
        result = await engine_sandbox.run_code("python", code)
        assert result.stdout.split("\n")[:3] == ["/etc/x no", "/tmp/x ok", "/workspace/x ok"], result.for_model()


def test_the_seccomp_profile_is_an_allow_list_with_the_set_id_fence() -> None:
    from shou.sandbox.docker_seccomp import profile

    for machine in ("x86_64", "aarch64"):
        prof = profile(machine)
        assert prof["defaultAction"] == "SCMP_ACT_ERRNO" and len(prof["architectures"]) == 1
        unconditional = {n for rule in prof["syscalls"] if "args" not in rule and rule["action"] == "SCMP_ACT_ALLOW"
                         for n in rule["names"]}
        # Never allowed outright: what sets modes, makes namespaces or reaches the kernel's machinery.
        for name in ("chmod", "fchmod", "fchmodat", "open", "openat", "creat", "mknod", "mknodat", "clone",
                     "clone3", "unshare", "setns", "mount", "bpf", "keyctl", "openat2", "io_uring_setup",
                     "fallocate", "personality", "init_module", "ptrace"):
            assert name not in unconditional, name
        refused = {n: r.get("errnoRet") for r in prof["syscalls"] if r["action"] == "SCMP_ACT_ERRNO" and "args" not in r
                   for n in r["names"]}
        assert refused["openat2"] == refused["clone3"] == 38 and refused["fallocate"] == 95  # ENOSYS, EOPNOTSUPP
