"""The last step before a pod's process executes: no new privileges, no capabilities,
and a seccomp filter refusing the system calls that lead out of the sandbox.

A pod's processes run as a uid of the pod's own, but an unprivileged user can still
ask the kernel for much: a user namespace (`unshare -U`) in which it is root and may
mount and build namespaces, keyrings, BPF programs, perf counters, userfaultfd, the
handles of `open_by_handle_at`. And a setuid program (or one with file capabilities)
would give it privileges back. So, after the process has joined the pod's namespaces
and cgroup and dropped to the pod's user (enter.py):

- `prepare` (still root) empties the capability bounding set, except what the pod was
  granted, and keeps the permitted set across the change of user when something was;
- `confine` (the pod's user) sets the permitted, effective and inheritable sets to the
  granted capabilities (nothing by default) and raises them as ambient ones, so the
  program executed has them and no others; sets `no_new_privs`, so setuid bits and
  file capabilities give nothing; and installs the filter (`build_filter`): a system
  call of another architecture (32-bit ones on x86-64: `int 0x80`, x32) kills the
  process; mount and the new mount API, `pivot_root`, `setns`, `unshare`/`clone` with
  namespace flags, `ptrace`, module and kexec loading, `bpf`, `perf_event_open`, the
  key management calls, `open_by_handle_at`, `userfaultfd`, `swapon`/`swapoff`,
  `reboot`, `acct`, setting the clock, `iopl`/`ioperm` fail with EPERM; `clone3`
  fails with ENOSYS (its flags are behind a pointer the filter cannot read; the C
  library then falls back to `clone`). The calls that a capability the pod was
  granted exists for (mount with SYS_ADMIN, ptrace with SYS_PTRACE, ...) stay allowed.

A privileged container (only when the node allows it) keeps the bounding set, gets
every capability as an ambient one, and has neither `no_new_privs` nor the filter.

Standard library only and importing nothing of vkpy: enter.py loads it as a file
beside it when it runs as a plain script. The filter is classic BPF, assembled here
(`build_filter`, pure logic, unit-tested) and loaded with prctl(PR_SET_SECCOMP).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from collections.abc import Iterable, Sequence

# --- capabilities ---------------------------------------------------------------------

CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)
"""Capability names (without `CAP_`) by number, as in linux/capability.h."""

PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_KEEPCAPS = 8
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
_CAP_VERSION_3 = 0x20080522


def bare_capability(name: str) -> str:
    """`CAP_NET_ADMIN` or `net_admin` as `NET_ADMIN` (known or not)."""
    return name.upper().removeprefix("CAP_")


def capability_number(name: str) -> int:
    """`NET_ADMIN`, `CAP_NET_ADMIN` or `net_admin` as its number; ValueError if unknown."""
    bare = bare_capability(name)
    if bare not in CAPABILITIES:
        raise ValueError(f"unknown capability {name!r}")
    return CAPABILITIES.index(bare)


@functools.cache
def last_capability() -> int:
    """The highest capability this kernel knows (read once: it does not change)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return len(CAPABILITIES) - 1


# --- the filter -----------------------------------------------------------------------

# Classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16
"""`seccomp_data.args[0]`, its low 32 bits (the architectures here are little-endian)."""

NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x00000080  # CLONE_NEWTIME
)
X32_SYSCALL_BIT = 0x40000000

_NUMBERS = """
call               x86_64  aarch64
mount                 165       40
umount2               166       39
pivot_root            155       41
swapon                167      224
swapoff               168      225
reboot                169      142
acct                  163       89
settimeofday          164      170
clock_settime         227      112
clock_adjtime         305      266
iopl                  172        -
ioperm                173        -
ptrace                101      117
kexec_load            246      104
kexec_file_load       320      294
init_module           175      105
finit_module          313      273
delete_module         176      106
bpf                   321      280
perf_event_open       298      241
keyctl                250      219
add_key               248      217
request_key           249      218
open_by_handle_at     304      265
userfaultfd           323      282
setns                 308      268
unshare               272       97
clone                  56      220
clone3                435      435
open_tree             428      428
move_mount            429      429
fsopen                430      430
fsconfig              431      431
fsmount               432      432
fspick                433      433
mount_setattr         442      442
"""
"""System call numbers (asm/unistd_64.h; asm-generic/unistd.h for aarch64)."""


def _numbers(column: int) -> dict[str, int]:
    rows = [line.split() for line in _NUMBERS.strip().splitlines()[1:]]
    return {row[0]: int(row[column]) for row in rows if row[column] != "-"}


ARCHITECTURES: dict[str, tuple[int, dict[str, int]]] = {
    # machine: (AUDIT_ARCH_*, system call numbers)
    "x86_64": (0xC000003E, _numbers(1)),
    "aarch64": (0xC00000B7, _numbers(2)),
}
ARCHITECTURES["arm64"] = ARCHITECTURES["aarch64"]

DENIED: dict[str, tuple[str, ...]] = {
    # the capability that would make them legitimate: the calls refused without it
    "SYS_ADMIN": (
        "mount",
        "umount2",
        "pivot_root",
        "setns",
        "swapon",
        "swapoff",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "open_by_handle_at",
        "userfaultfd",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
    ),
    "SYS_BOOT": ("reboot", "kexec_load", "kexec_file_load"),
    "SYS_MODULE": ("init_module", "finit_module", "delete_module"),
    "SYS_PACCT": ("acct",),
    "SYS_TIME": ("settimeofday", "clock_settime", "clock_adjtime"),
    "SYS_RAWIO": ("iopl", "ioperm"),
    "SYS_PTRACE": ("ptrace",),
}
"""The system calls refused with EPERM, by the capability a pod needs to be allowed them."""


def denied_calls(granted: Iterable[str] = ()) -> tuple[str, ...]:
    """The calls refused for a process granted these capabilities (names, no `CAP_`)."""
    keep = {bare_capability(c) for c in granted}
    return tuple(call for cap, calls in DENIED.items() if cap not in keep for call in calls)


Instruction = tuple[int, int, int, int]
"""code, jump if true, jump if false, k: one `struct sock_filter`."""


def build_filter(machine: str, granted: Iterable[str] = ()) -> list[Instruction]:
    """The filter for processes of `machine` (os.uname().machine) granted these
    capabilities; ValueError for an architecture it does not know."""
    if machine not in ARCHITECTURES:
        raise ValueError(f"no seccomp filter for the {machine} architecture")
    arch, numbers = ARCHITECTURES[machine]
    keep = {bare_capability(c) for c in granted}
    # Symbolic program: jump targets are labels, resolved below.
    program: list[tuple[int, str | int, str | int, int]] = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 0, "kill", arch),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    if machine == "x86_64":
        program.append((BPF_JGE_K, "deny", 0, X32_SYSCALL_BIT))
    for call in dict.fromkeys(denied_calls(keep)):
        if call in numbers:
            program.append((BPF_JEQ_K, "deny", 0, numbers[call]))
    program.append((BPF_JEQ_K, "nosys", 0, numbers["clone3"]))
    if "SYS_ADMIN" not in keep:
        program.append((BPF_JEQ_K, "flags", 0, numbers["unshare"]))
        program.append((BPF_JEQ_K, "flags", 0, numbers["clone"]))
    labels: dict[str, int] = {}
    tail: list[tuple[str | None, tuple[int, str | int, str | int, int]]] = [
        (None, (BPF_RET_K, 0, 0, RET_ALLOW)),
        ("flags", (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW)),
        (None, (BPF_JSET_K, "deny", 0, NAMESPACE_FLAGS)),
        (None, (BPF_RET_K, 0, 0, RET_ALLOW)),
        ("deny", (BPF_RET_K, 0, 0, RET_ERRNO | errno.EPERM)),
        ("nosys", (BPF_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)),
        ("kill", (BPF_RET_K, 0, 0, RET_KILL_PROCESS)),
    ]
    for label, instruction in tail:
        if label is not None:
            labels[label] = len(program)
        program.append(instruction)

    def resolve(target: str | int, index: int) -> int:
        if isinstance(target, int):
            return target
        offset = labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp filter: jump to {target} out of range")
        return offset

    return [
        (code, resolve(jt, i), resolve(jf, i), k) for i, (code, jt, jf, k) in enumerate(program)
    ]


def encode(program: Sequence[Instruction]) -> bytes:
    """The program as an array of `struct sock_filter`."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


# --- applying it ----------------------------------------------------------------------


class _Fprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(libc: ctypes.CDLL, *args: int | ctypes.c_void_p) -> None:
    values = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    values += [ctypes.c_ulong(0)] * (5 - len(values))
    if libc.prctl(*values) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({args[0]}): {os.strerror(error)}")


def _capset(libc: ctypes.CDLL, numbers: Iterable[int]) -> None:
    """Permitted, effective and inheritable: exactly `numbers`."""
    mask = 0
    for number in numbers:
        mask |= 1 << number
    low, high = mask & 0xFFFFFFFF, mask >> 32
    header = struct.pack("=Ii", _CAP_VERSION_3, 0)
    data = struct.pack("=6I", low, low, low, high, high, high)
    header_buffer = ctypes.create_string_buffer(header, len(header))
    data_buffer = ctypes.create_string_buffer(data, len(data))
    if libc.capset(header_buffer, data_buffer) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"capset: {os.strerror(error)}")


def granted_numbers(capabilities: Iterable[str], privileged: bool) -> list[int]:
    """The capability numbers a process keeps (all of them when privileged), of those
    vkpy has itself (its bounding set): nothing can be given that vkpy does not have."""
    libc = _libc()
    last = last_capability()
    wanted = (
        range(last + 1)
        if privileged
        else sorted({n for n in map(capability_number, capabilities) if n <= last})
    )
    return [n for n in wanted if libc.prctl(PR_CAPBSET_READ, ctypes.c_ulong(n), 0, 0, 0) == 1]


def prepare(capabilities: Sequence[str], privileged: bool) -> None:
    """Before dropping root: empty the bounding set but for the granted capabilities,
    and keep them through the change of user. Nothing to do when vkpy is not root."""
    if os.geteuid() != 0:
        return
    libc = _libc()
    if privileged:
        _prctl(libc, PR_SET_KEEPCAPS, 1)
        return
    keep = set(granted_numbers(capabilities, privileged))
    for number in range(last_capability() + 1):
        if number not in keep:
            try:
                _prctl(libc, PR_CAPBSET_DROP, number)
            except OSError as error:
                if error.errno != errno.EINVAL:  # EINVAL: past this kernel's last one
                    raise
                break
    if keep:
        _prctl(libc, PR_SET_KEEPCAPS, 1)


def confine(capabilities: Sequence[str], privileged: bool, seccomp: bool) -> None:
    """After dropping root: only the granted capabilities (as ambient ones), then
    `no_new_privs` and the filter (unless privileged, or `seccomp` is False)."""
    libc = _libc()
    keep = granted_numbers(capabilities, privileged)
    if os.geteuid() != 0:  # root stays root: only the pod's user is confined this way
        _capset(libc, keep)
        _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
        for number in keep:
            _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, number)
    if privileged:
        return
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    if not seccomp:
        return
    code = encode(build_filter(os.uname().machine, [CAPABILITIES[n] for n in keep]))
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _Fprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    _prctl(libc, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_void_p(ctypes.addressof(fprog)))
