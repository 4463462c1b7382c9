"""The resident executor of a warm Docker sandbox: runs inside the container, one command at a time.

Not imported by shou: its source is handed to the container's `python3 -c`, so it uses the standard
library only. It connects once to the socket shou listens on (shou then removes the socket, so no program
can connect after it), makes itself undumpable (no program of the same uid can read its memory or take
its socket; ptrace is refused by the seccomp profile anyway), and serves calls over that one connection.

A call is one JSON frame: argv, env, rlimits and whether /code holds a stdin file. The command starts in
a fresh session with those rlimits; its stdout and stderr come back as frames as they arrive. When the
command's first process ends, or shou asks for a kill (the time limit, the disk allowance), or shou goes
away, every other process of the container but the init and this one is killed (`kill(-1)`, the same
end the kernel gives a pid namespace when its first process dies), and what a command could leave
behind for the next one is removed: the files in /tmp, /dev/shm, /dev/mqueue and /code, System V IPC
objects and the keyrings of its uid.

Frames: one type byte, a 4-byte big-endian length, the payload. shou sends `c` (a call, JSON) and `k`
(kill now); the executor sends `r` (ready: when it starts, and once a call's leftovers are removed), `o`
(stdout), `e` (stderr) and `x` (the end: JSON with the wait status).
"""

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys

HEADER = struct.Struct(">cI")
CLEAN = ("/tmp", "/dev/shm", "/dev/mqueue", "/code")
IPC_RMID = 0
KEYCTL = {"x86_64": 250, "aarch64": 219}  # the keyctl system call's number
KEYCTL_CLEAR = 7
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -3, -4, -5
WAKE = os.pipe()
REAPED = {}
IDLE = 900.0  # seconds without a call before the executor, and so its sandbox, ends
CODE = "/code"
LIMITS = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE, "core": resource.RLIMIT_CORE,
          "data": resource.RLIMIT_DATA, "nproc": resource.RLIMIT_NPROC}


def recv_exact(conn, n):
    data = bytearray()
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise EOFError
        data += part
    return bytes(data)


def send(conn, kind, payload=b""):
    conn.sendall(HEADER.pack(kind, len(payload)) + payload)


def others():
    """Live pids in the sandbox but init and this process (a killed process awaiting its reaper is not)."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # gone meanwhile
            if state not in (b"Z", b"X"):
                found.append(int(name))
    return found


def kill_all():
    """Kill every other process this uid may signal, until none is left (a fork racing kill(-1) included)."""
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:  # nothing but init and this process: nothing to look for either
            reap()
            return
        reap()
        if not others():
            return
        os.sched_yield()
    # Still not alone: end the whole sandbox (its PID 1 or its container's only child) rather than serve on.
    os._exit(3)


def reap():
    """Reap every child that has ended (orphans too, as PID 1), keeping their wait statuses."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def empty(folder):
    """Remove everything in `folder`. The command may have made folders unreadable to its own uid, or a tree
    deeper than any recursion (a recursive walk raised RecursionError at 1,500 levels, which ended the
    executor), or wider than a walk that lists a folder again after each subfolder can afford (30,000
    folders: a minute): one folder is open at a time, gone down into by name and up from through '..', and
    each folder is listed once, its subfolders kept to be emptied one after another."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    names, todo = [], [_clear(fd)]  # the folders gone down through; the subfolders left to empty, by level
    try:
        while True:
            if todo[-1]:
                sub = todo[-1].pop()
                try:
                    os.chmod(sub, 0o700, dir_fd=fd)
                    inner = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = inner
                names.append(sub)
                todo.append(_clear(fd))
                continue
            if not names:
                return
            outer = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = outer
            todo.pop()
            with contextlib.suppress(OSError):
                os.rmdir(names.pop(), dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)


def _clear(fd):
    """Unlink what the folder `fd` holds but folders: the folders in it."""
    try:
        with os.scandir(fd) as entries:
            found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    except OSError:
        return []
    folders = []
    for name, is_dir in found:
        if is_dir:
            folders.append(name)
        else:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    return folders


def remove_ipc(libc):
    """Remove the System V shared memory, message queues and semaphores a command made."""
    for kind, call in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                call(ident, 0, IPC_RMID)
            else:
                call(ident, IPC_RMID, None)


def write_files(call):
    """Put the call's files (and stdin) in /code, when they come with the call (else shou put them there)."""
    import base64

    for name, data in call.get("files", {}).items():  # /code was emptied after the last call
        parts = [p for p in name.split("/") if p]
        if not parts or ".." in parts:
            continue
        path = os.path.join(CODE, *parts)
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data))


def clear_keyrings(libc):
    """Empty the user, user-session and session keyrings: a long-lived user namespace keeps its uid's
    keyrings from one call to the next (Docker's seccomp profile refuses the key calls anyway)."""
    keyctl = KEYCTL.get(os.uname().machine)
    if keyctl is None:
        return
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING, KEY_SPEC_SESSION_KEYRING):
        libc.syscall(keyctl, KEYCTL_CLEAR, ctypes.c_int(ring))


def start(call):
    def limit():
        for name, (soft, hard) in call["rlimits"].items():
            resource.setrlimit(LIMITS[name], (soft, hard))

    write_files(call)
    stdin = os.open(CODE + "/" + call["stdin"], os.O_RDONLY) if call.get("stdin") else os.open("/dev/null", os.O_RDONLY)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(stdin, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 65536)
            limit()
            try:  # the memory limit's killer takes the command's processes before the executor
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")
            except OSError:
                pass
            os.chdir("/workspace")
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.execvpe(call["argv"][0], call["argv"], call.get("env") or os.environ)
        except BaseException as e:  # whatever happens, the child never returns into the executor's code
            try:
                os.write(2, f"{call['argv'][0]}: {getattr(e, 'strerror', None) or e}\n".encode())
            finally:
                os._exit(127 if isinstance(e, FileNotFoundError) else 126)
        os._exit(127)
    for fd in (stdin, out_w, err_w):
        os.close(fd)
    return pid, out_r, err_r


def serve_call(conn, call, libc):
    pid, out_r, err_r = start(call)
    sel = selectors.DefaultSelector()
    sel.register(out_r, selectors.EVENT_READ, b"o")
    sel.register(err_r, selectors.EVENT_READ, b"e")
    sel.register(conn, selectors.EVENT_READ, None)
    sel.register(WAKE[0], selectors.EVENT_READ, b"w")
    status = None
    killed = False
    open_pipes = 2
    while open_pipes:
        for key, _ in sel.select():
            if key.data == b"w":  # SIGCHLD: the first process may have ended
                try:
                    while os.read(WAKE[0], 512):
                        pass
                except BlockingIOError:
                    pass
                continue
            if key.data is None:
                try:
                    _kind, size = HEADER.unpack(recv_exact(conn, HEADER.size))
                    recv_exact(conn, size)
                except (EOFError, OSError):
                    kill_all()
                    raise
                killed = True
                kill_all()
                continue
            chunk = os.read(key.fd, 65536)
            if chunk:
                send(conn, key.data, chunk)
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
                open_pipes -= 1
        if status is None:
            reap()
            if pid in REAPED:
                status = REAPED.pop(pid)
                # Once the first process is gone its leftovers go too: the writers still holding the
                # pipes die, so the reads end.
                kill_all()
    while status is None:  # killed: it is gone, or going
        reap()
        status = REAPED.pop(pid, None)
        if status is None:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = REAPED.pop(pid, 9)
    sel.unregister(WAKE[0])
    sel.close()
    kill_all()
    REAPED.clear()
    # Nothing of the call runs any more: say so now, and tidy before reading the next call.
    send(conn, b"x", json.dumps({"status": status, "killed": killed}).encode())
    for folder in CLEAN:
        empty(folder)
    remove_ipc(libc)
    clear_keyrings(libc)
    send(conn, b"r", b"")  # tidied: shou sends the next call only after this (else it was never started)


def select_idle(conn):
    """Wait for the next call; False when none came within IDLE seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(conn, selectors.EVENT_READ)
        return bool(sel.select(timeout=IDLE))


def main():
    for fd in WAKE:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(WAKE[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        sys.exit("prctl(PR_SET_DUMPABLE) failed")
    if sys.argv[1].startswith("fd:"):  # bubblewrap: one end of a socket pair, inherited
        conn = socket.socket(fileno=int(sys.argv[1][3:]))
    else:  # Docker: the socket shou listens on
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sys.argv[1])
    os.chdir("/")
    send(conn, b"r", str(os.getpid()).encode())
    while True:
        # Idle for long (a server's workspace nobody uses): exit; shou makes a new sandbox on the next call.
        if not select_idle(conn):
            kill_all()
            return
        try:
            kind, size = HEADER.unpack(recv_exact(conn, HEADER.size))
            payload = recv_exact(conn, size)
        except (EOFError, OSError):
            kill_all()
            return
        if kind == b"c":
            try:
                serve_call(conn, json.loads(payload), libc)
            except (EOFError, OSError):
                return


if __name__ == "__main__":
    main()
