"""The seccomp filter of the process backend (seccomp.py) and what a pod may ask of the
node's privileges (privileges.py).

The filter is run here by a small classic-BPF interpreter over `seccomp_data` records,
so what it answers for each system call, argument and architecture is checked without
a kernel; tests/integration/test_process_hardening.py checks it in the kernel.
"""

from __future__ import annotations

import errno
import struct
from typing import Any

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import UnsupportedError
from vkpy.providers.process import privileges, seccomp
from vkpy.providers.process.seccomp import ARCHITECTURES, Instruction, build_filter, encode

ALLOW = seccomp.RET_ALLOW
EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS
KILL = seccomp.RET_KILL_PROCESS
X86 = ARCHITECTURES["x86_64"][0]
I386 = 0x40000003
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
CLONE_THREAD_FLAGS = 0x003D0F00  # what pthread_create passes to clone


def run(program: list[Instruction], nr: int, arch: int = X86, args: tuple[int, ...] = ()) -> int:
    """What the filter answers for one system call (a classic-BPF interpreter for the
    instructions the filter uses)."""
    values = [*args, *[0] * (6 - len(args))]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *values)
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == seccomp.BPF_LD_W_ABS:
            accumulator = struct.unpack_from("=I", data, k)[0]
        elif code == seccomp.BPF_RET_K:
            return k
        elif code in (seccomp.BPF_JEQ_K, seccomp.BPF_JGE_K, seccomp.BPF_JSET_K):
            taken = {
                seccomp.BPF_JEQ_K: accumulator == k,
                seccomp.BPF_JGE_K: accumulator >= k,
                seccomp.BPF_JSET_K: bool(accumulator & k),
            }[code]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


def nr(call: str, machine: str = "x86_64") -> int:
    return ARCHITECTURES[machine][1][call]


ESCAPES = [
    "mount",
    "umount2",
    "pivot_root",
    "setns",
    "ptrace",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "userfaultfd",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "settimeofday",
    "clock_settime",
    "iopl",
    "ioperm",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_obvious_escapes_are_refused_with_eperm(machine: str) -> None:
    arch, numbers = ARCHITECTURES[machine]
    program = build_filter(machine)
    for call in ESCAPES:
        if call in numbers:
            assert run(program, numbers[call], arch) == EPERM, call


def test_ordinary_calls_are_allowed() -> None:
    program = build_filter("x86_64")
    # read, write, openat, execve, wait4, kill, socket, bind, futex, exit_group
    for number in (0, 1, 257, 59, 61, 62, 41, 49, 202, 231):
        assert run(program, number) == ALLOW, number


def test_namespace_flags_of_unshare_and_clone_are_refused_other_flags_are_not() -> None:
    program = build_filter("x86_64")
    for call in ("unshare", "clone"):
        assert run(program, nr(call), args=(CLONE_NEWUSER,)) == EPERM
        assert run(program, nr(call), args=(CLONE_NEWNS | 0x100,)) == EPERM
        assert run(program, nr(call), args=(0x80,)) == EPERM  # CLONE_NEWTIME
    assert run(program, nr("clone"), args=(CLONE_THREAD_FLAGS,)) == ALLOW  # threads
    assert run(program, nr("clone"), args=(0x01200011,)) == ALLOW  # fork (SIGCHLD|...)
    assert run(program, nr("unshare"), args=(0x200,)) == ALLOW  # CLONE_FS


def test_clone3_is_answered_enosys_so_the_c_library_falls_back_to_clone() -> None:
    assert run(build_filter("x86_64"), nr("clone3")) == ENOSYS


def test_another_architecture_is_killed_and_x32_calls_refused() -> None:
    program = build_filter("x86_64")
    assert run(program, 11, arch=I386) == KILL  # munmap or anything, by int 0x80
    assert run(program, nr("mount"), arch=I386) == KILL
    assert run(program, 0x40000000 | 1, arch=X86) == EPERM  # x32 write
    assert run(build_filter("aarch64"), 63, arch=X86) == KILL


def test_a_granted_capability_lets_through_the_calls_it_exists_for() -> None:
    program = build_filter("x86_64", ["SYS_PTRACE", "CAP_SYS_TIME"])
    assert run(program, nr("ptrace")) == ALLOW
    assert run(program, nr("settimeofday")) == ALLOW
    assert run(program, nr("mount")) == EPERM
    admin = build_filter("x86_64", ["SYS_ADMIN"])
    assert run(admin, nr("mount")) == ALLOW
    assert run(admin, nr("unshare"), args=(CLONE_NEWUSER,)) == ALLOW
    assert run(admin, nr("reboot")) == EPERM


def test_every_jump_lands_inside_the_program_and_it_encodes_to_sock_filters() -> None:
    program = build_filter("x86_64")
    for index, (code, jt, jf, _) in enumerate(program):
        if code != seccomp.BPF_RET_K:
            assert index + 1 + max(jt, jf) < len(program)
    assert program[-1][0] == seccomp.BPF_RET_K
    assert len(encode(program)) == 8 * len(program)
    with pytest.raises(ValueError, match="riscv64"):
        build_filter("riscv64")


def test_capability_names_and_numbers() -> None:
    assert seccomp.capability_number("CAP_NET_BIND_SERVICE") == 10
    assert seccomp.capability_number("sys_admin") == 21
    assert seccomp.capability_number("CHECKPOINT_RESTORE") == 40
    with pytest.raises(ValueError, match="FLY"):
        seccomp.capability_number("FLY")


# --- privileges.py --------------------------------------------------------------------


def pod(security: dict[str, Any] | None = None, **spec: Any) -> PodConfig:
    app = ContainerConfig("app", "busybox", ("true",), (), spec={"securityContext": security or {}})
    return PodConfig(
        ref=PodRef("ns", "p", "u"),
        pod={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}], **spec}},
        init_containers=(),
        containers=(app,),
        volumes=(),
    )


@pytest.mark.parametrize(
    ("config", "words", "allowance"),
    [
        (pod(hostPID=True), "hostPID", "hostPID"),
        (pod(hostNetwork=True), "hostNetwork", "hostNetwork"),
        (pod(hostIPC=True), "hostIPC", "hostIPC"),
        (pod({"privileged": True}), "privileged", "privileged"),
        (pod({"capabilities": {"add": ["NET_ADMIN"]}}), "NET_ADMIN", "capabilities"),
        (pod({"seccompProfile": {"type": "Unconfined"}}), "Unconfined", "unconfined"),
        (
            pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            "Unconfined",
            "unconfined",
        ),
    ],
)
def test_what_the_node_does_not_allow_is_refused_and_allowed_when_it_does(
    config: PodConfig, words: str, allowance: str
) -> None:
    with pytest.raises(UnsupportedError) as refused:
        privileges.check_pod(config, ())
    assert refused.value.reason == "UnsupportedSecurityContext"
    assert words in str(refused.value) and f"does not list {allowance}" in str(refused.value)
    privileges.check_pod(config, (allowance,))  # vkpy runs the unit tests as root here


def test_localhost_profiles_and_unknown_capabilities_are_refused_even_when_allowed() -> None:
    with pytest.raises(UnsupportedError, match="Localhost"):
        privileges.check_pod(pod({"seccompProfile": {"type": "Localhost"}}), privileges.ALLOWANCES)
    with pytest.raises(UnsupportedError, match="FLY"):
        privileges.check_pod(pod({"capabilities": {"add": ["FLY"]}}), privileges.ALLOWANCES)


def test_confinement_grants_only_what_was_asked_and_allowed() -> None:
    plain = pod()
    assert privileges.confinement(plain, plain.containers[0], ()) == privileges.Confinement()
    asks = pod({"capabilities": {"add": ["CAP_NET_BIND_SERVICE"]}, "privileged": True})
    granted = privileges.confinement(asks, asks.containers[0], ("capabilities",))
    assert granted == privileges.Confinement(("NET_BIND_SERVICE",), False, True)
    full = privileges.confinement(asks, asks.containers[0], ("capabilities", "privileged"))
    assert full.privileged
    unconfined = pod(securityContext={"seccompProfile": {"type": "Unconfined"}})
    assert not privileges.confinement(unconfined, unconfined.containers[0], ("unconfined",)).seccomp
    everything = pod({"capabilities": {"add": ["ALL"]}})
    caps = privileges.confinement(everything, everything.containers[0], ("capabilities",))
    assert caps.capabilities == seccomp.CAPABILITIES


def test_the_allow_setting_is_checked() -> None:
    assert privileges.parse_allow(["hostPID", "privileged"]) == ("hostPID", "privileged")
    assert privileges.parse_allow(None) == ()
    # hostUsers: `runtime: oci`'s `hostUsers: true` (privileges.check_host_access).
    assert privileges.parse_allow(["hostUsers"]) == ("hostUsers",)
    with pytest.raises(ValueError, match="hostRoot"):
        privileges.parse_allow(["hostRoot"])
