"""A small seccomp filter for sandboxed code: the few system calls whose effect outlives the sandbox.

What sandboxed code writes into the workspace stays there after the run, owned (on disk) by the
workspace's owner, who may be root. So it may not mark a file set-user-ID or set-group-ID (`chmod`,
`fchmod`, `fchmodat`, `fchmodat2`, and creating one with such a mode through `open`, `openat`, `creat`,
`mknod`, `mknodat`): a setuid-root program left in a project is root for anyone who can run it. Calls
that take their mode in a structure the filter cannot read (`openat2`) and a ring that bypasses filters
(`io_uring`) answer ENOSYS, so programs fall back to the plain calls. `fallocate` answers EOPNOTSUPP
(programs fall back to writing, which the disk allowance can see); it could otherwise reserve gigabytes
between two looks. Everything else is allowed: this is a fence around persistent side effects, not the
sandbox's main wall (namespaces and no capabilities are).

The program is classic BPF, as `bwrap --seccomp FD` takes it (what `seccomp_export_bpf` writes), built here
for x86_64 and aarch64; other architectures and the x32 ABI get ENOSYS for every call.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

__all__ = ["filter_bytes", "supported"]

# BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
S_ISUID, S_ISGID = 0o4000, 0o2000
X32_BIT = 0x40000000

# name: (number, index of the mode argument, or None: refused outright with the errno given)
_X86_64 = {
    "chmod": (90, 1), "fchmod": (91, 1), "fchmodat": (268, 2), "fchmodat2": (452, 2), "open": (2, 2),
    "openat": (257, 3), "creat": (85, 1), "mknod": (133, 1), "mknodat": (259, 2),
}
_AARCH64 = {"fchmod": (52, 1), "fchmodat": (53, 2), "fchmodat2": (452, 2), "openat": (56, 3), "mknodat": (33, 2)}
_REFUSED_X86_64 = {437: errno.ENOSYS, 425: errno.ENOSYS, 426: errno.ENOSYS, 427: errno.ENOSYS,  # openat2, io_uring
                   285: errno.EOPNOTSUPP}  # fallocate
_REFUSED_AARCH64 = {437: errno.ENOSYS, 425: errno.ENOSYS, 426: errno.ENOSYS, 427: errno.ENOSYS,
                    47: errno.EOPNOTSUPP}
ARCHES = {"x86_64": (0xC000003E, _X86_64, _REFUSED_X86_64), "aarch64": (0xC00000B7, _AARCH64, _REFUSED_AARCH64)}


def supported() -> bool:
    """Whether this machine's architecture has a filter."""
    return platform.machine() in ARCHES


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def filter_bytes(machine: str | None = None) -> bytes:
    """The compiled filter for `machine` (default: this one); `ValueError` for an unknown architecture."""
    arch, mode_calls, refused = ARCHES[machine or platform.machine()]
    deny = RET_ERRNO | errno.EPERM
    prog: list[bytes] = [_insn(LD_W_ABS, 4)]  # seccomp_data.arch
    # Any other ABI (i386 on x86_64, for one) would bring other syscall numbers: refuse it all.
    prog.append(_insn(JEQ_K, arch, jt=1, jf=0))
    prog.append(_insn(RET_K, RET_ERRNO | errno.ENOSYS))
    prog.append(_insn(LD_W_ABS, 0))  # seccomp_data.nr
    if machine == "x86_64" or (machine is None and platform.machine() == "x86_64"):
        prog.append(_insn(JGE_K, X32_BIT, jt=0, jf=1))
        prog.append(_insn(RET_K, RET_ERRNO | errno.ENOSYS))
    for nr, code in refused.items():
        prog.append(_insn(JEQ_K, nr, jt=0, jf=1))
        prog.append(_insn(RET_K, RET_ERRNO | code))
    for nr, arg in mode_calls.values():
        # if nr matches: load the low half of the mode argument; set-id bits -> EPERM; else allow.
        prog.append(_insn(JEQ_K, nr, jt=0, jf=4))
        prog.append(_insn(LD_W_ABS, 16 + 8 * arg if struct.pack("=I", 1)[0] == 1 else 20 + 8 * arg))
        prog.append(_insn(JSET_K, S_ISUID | S_ISGID, jt=0, jf=1))
        prog.append(_insn(RET_K, deny))
        prog.append(_insn(RET_K, RET_ALLOW))
    prog.append(_insn(RET_K, RET_ALLOW))
    return b"".join(prog)


def filter_fd() -> int:
    """A memfd holding this machine's filter, positioned at its start (bwrap reads it to the end)."""
    fd = os.memfd_create("shou-seccomp")
    os.write(fd, filter_bytes())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
