"""The process backend's `images` setting: which rule an image reference matches, what
runs for a container (command replaces the entrypoint, args replace the CMD), and the
shipped stand-ins (pause, the nginx/httpd web server, busybox's sh) as real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from vkpy.providers.base import ContainerConfig, PodConfig, PodRef
from vkpy.providers.errors import InvalidInputError
from vkpy.providers.process.config import ProcessConfig
from vkpy.providers.process.images import ImageRule, ImageSpec, ImageTable, split_reference
from vkpy.providers.process.standins import BUSYBOX_BIN, HERE, default_rules

PYTHON = sys.executable
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def table(raw: dict[str, object] | None = None) -> ImageTable:
    config = ProcessConfig.from_dict(
        {"images": raw} if raw is not None else {}, state_dir="/tmp", internal_ip="127.0.0.1"
    )
    return ImageTable(config.images, default_rules(PYTHON))


def container(
    image: str, command: tuple[str, ...] = (), args: tuple[str, ...] = (), **kw: object
) -> ContainerConfig:
    return ContainerConfig("app", image, command, args, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("busybox", ("docker.io/library/busybox", None)),
        ("busybox:1.36", ("docker.io/library/busybox", "1.36")),
        ("library/nginx@sha256:abcd", ("docker.io/library/nginx", None)),
        ("bitnami/nginx:1.2", ("docker.io/bitnami/nginx", "1.2")),
        ("localhost:5000/app:v1", ("localhost:5000/app", "v1")),
        (
            "registry.k8s.io/e2e-test-images/agnhost:2.63.0",
            ("registry.k8s.io/e2e-test-images/agnhost", "2.63.0"),
        ),
    ],
)
def test_references_are_compared_by_repository_and_registry(
    reference: str, expected: tuple[str, str | None]
) -> None:
    assert split_reference(reference) == expected


@pytest.mark.parametrize(
    ("pattern", "image", "matches"),
    [
        ("busybox", "docker.io/library/busybox:1.36", True),
        ("busybox", "busybox@sha256:0123", True),
        ("busybox:1.36", "busybox:1.37", False),
        ("busybox:1.36", "docker.io/library/busybox:1.36", True),
        ("*/busybox", "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", True),
        ("*/busybox", "example.com/busyboxes:1", False),
        ("registry.k8s.io/pause", "registry.k8s.io/pause:3.10.2", True),
        ("registry.k8s.io/pause", "example.com/pause:3", False),
    ],
)
def test_patterns_ignore_tags_unless_they_name_one(pattern: str, image: str, matches: bool) -> None:
    assert ImageRule(pattern, ImageSpec()).matches(image) is matches


def test_an_image_only_container_runs_the_entrypoint_and_cmd() -> None:
    resolved = table({"example.com/tool": {"entrypoint": ["/opt/tool"], "cmd": ["serve"]}}).resolve(
        container("example.com/tool:1")
    )
    assert resolved.argv == ("/opt/tool", "serve")


def test_args_replace_the_cmd_and_command_replaces_the_entrypoint() -> None:
    images = table({"example.com/tool": {"entrypoint": ["/opt/tool"], "cmd": ["serve"]}})
    assert images.resolve(container("example.com/tool", args=("check", "-v"))).argv == (
        "/opt/tool",
        "check",
        "-v",
    )
    assert images.resolve(container("example.com/tool", command=("env",))).argv == ("env",)


def test_agnhost_takes_its_subcommand_as_args_and_pauses_without() -> None:
    images = table()
    resolved = images.resolve(container(AGNHOST, args=("netexec",)))
    assert resolved.argv == ("/agnhost", "netexec")
    assert dict(resolved.env)["PATH"].startswith(BUSYBOX_BIN + ":")
    assert images.resolve(container(AGNHOST)).argv == ("/agnhost", "pause")


def run(argv: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def test_busybox_runs_sh_from_its_own_directory_even_by_absolute_path() -> None:
    images = table()
    only = images.resolve(container("busybox:1.36"))
    assert only.argv == ("sh",)
    assert only.working_dir == "/"
    by_path = images.resolve(container("busybox", command=("/bin/sh", "-c", "[[ $0 ]] && echo $0")))
    assert os.path.join(BUSYBOX_BIN, "sh") in by_path.argv
    assert run(by_path.argv, dict(by_path.env)) == "sh\n"  # bash (with [[), named sh
    host = images.resolve(container("busybox", command=("/bin/cat", "x")))
    assert host.argv == ("/bin/cat", "x")


def test_the_image_path_goes_first_and_the_pods_own_env_wins() -> None:
    images = table({"example.com/tool": {"cmd": ["tool"], "path": ["/opt/bin"], "env": {"A": "1"}}})
    resolved = images.resolve(container("example.com/tool"))
    env = dict(resolved.env)
    assert env["PATH"].split(":")[0] == "/opt/bin"
    assert env["A"] == "1"
    mine = images.resolve(container("example.com/tool", env=(("PATH", "/mine"), ("A", "2"))))
    assert dict(mine.env) == {"PATH": "/mine", "A": "2"}


def test_an_absolute_program_the_host_lacks_runs_from_the_path_under_its_image_name(
    tmp_path: Path,
) -> None:
    # `cat /proc/self/cmdline` shows the argv the program got, argv[0] included.
    (tmp_path / "agnhost").symlink_to(os.path.realpath("/bin/cat"))
    (tmp_path / "agnhost-2").symlink_to("agnhost")
    images = table({"*/agnhost": {"entrypoint": ["/agnhost"], "env": {"PATH": str(tmp_path)}}})
    resolved = images.resolve(container("x/agnhost", args=("/proc/self/cmdline",)))
    assert run(resolved.argv) == "/agnhost\0/proc/self/cmdline\0"
    second = images.resolve(container("x/agnhost", command=("/agnhost-2", "/proc/self/cmdline")))
    assert run(second.argv) == "/agnhost-2\0/proc/self/cmdline\0"


def test_an_unknown_image_without_command_names_the_setting() -> None:
    with pytest.raises(InvalidInputError, match="`images` setting") as caught:
        table().resolve(container("example.com/team/app:1.0"))
    assert caught.value.reason == "NoCommand"
    unknown = container("example.com/team/app:1.0", command=("sleep", "1"))
    assert table().resolve(unknown) == unknown


def test_configured_entries_replace_or_drop_the_defaults() -> None:
    images = table({"busybox": None, "*/nginx": {"entrypoint": ["/usr/sbin/nginx"]}})
    with pytest.raises(InvalidInputError):
        images.resolve(container("busybox"))
    assert images.resolve(container("nginx:1.27")).argv == ("/usr/sbin/nginx",)


@pytest.mark.parametrize(
    "raw",
    [["busybox"], {"busybox": {"entrypoint": ["sh"], "bogus": 1}}, {"x": {"working_dir": "rel"}}],
)
def test_malformed_settings_are_refused(raw: object) -> None:
    with pytest.raises(ValueError, match="images"):
        ProcessConfig.from_dict({"images": raw}, state_dir="/tmp", internal_ip="127.0.0.1")


def test_the_busybox_sh_keeps_dashed_names_and_has_double_brackets() -> None:
    out = subprocess.run(
        [os.path.join(BUSYBOX_BIN, "sh"), "-c", '[[ -n x ]] && env | grep "^a-b="'],
        env={"a-b": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "a-b=1\n"
    applet = subprocess.run(
        [os.path.join(BUSYBOX_BIN, "busybox"), "echo", "hi"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert applet.stdout == "hi\n"


def test_pause_waits_until_terminated_and_exits_zero() -> None:
    process = subprocess.Popen([PYTHON, "-I", "-S", str(HERE / "pause.py")])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
    finally:
        process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def _get(url: str, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_web_stand_in_serves_its_root_or_its_page(tmp_path: Path) -> None:
    docroot = tmp_path / "usr/share/nginx/html"
    docroot.mkdir(parents=True)
    (docroot / "data.txt").write_text("from a volume\n")
    port = free_port()
    argv = [PYTHON, "-I", "-S", str(HERE / "web.py"), "--port", str(port)]
    process = subprocess.Popen(
        [*argv, "--root", "/usr/share/nginx/html", "--page", "nginx"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        assert "Welcome to nginx!" in _get(f"http://127.0.0.1:{port}/", deadline)
        assert _get(f"http://127.0.0.1:{port}/data.txt", deadline) == "from a volume\n"
    finally:
        process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert process.stdout is not None
    assert '"GET /data.txt HTTP/1.1" 200' in process.stdout.read()


def test_exec_probes_hooks_and_exec_sessions_find_programs_as_in_the_image() -> None:
    images = table()
    probe = {"exec": {"command": ["/bin/sh", "-c", "test -f ready"]}}
    original = {
        "readinessProbe": probe,
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh"]}}},
    }
    resolved = images.resolve(container("busybox", command=("sleep", "60"), spec=original))
    sh = os.path.join(BUSYBOX_BIN, "sh")
    assert resolved.spec["readinessProbe"]["exec"]["command"] == [sh, "-c", "test -f ready"]
    assert resolved.spec["lifecycle"]["preStop"]["exec"]["command"] == [sh]
    assert probe["exec"]["command"][0] == "/bin/sh"  # the pod's own spec is not changed
    assert images.command(resolved, ["/bin/sh", "-c", "id"]) == [sh, "-c", "id"]
    assert images.command(resolved, ["ls"]) == ["ls"]


def test_an_images_user_runs_containers_that_name_none_and_decides_run_as_non_root() -> None:
    """The image's USER (`user`): a container without a runAsUser of its own or its
    pod's runs as it, and the non-root check knows a root image (kubelet parity)."""
    images = table({"example.com/app": {"entrypoint": ["app"], "user": 4321}})
    assert images.image_user("example.com/app:1") == 4321
    assert images.image_user("busybox:1.36") == 0  # a stand-in of a root image
    assert images.image_user("example.com/unknown") is None
    assert images.image_user("registry.k8s.io/e2e-test-images/nonroot:1.5") == 1234
    plain = images.resolve(container("example.com/app:1"))
    assert plain.spec["securityContext"]["runAsUser"] == 4321
    own = container("example.com/app:1", spec={"securityContext": {"runAsUser": 5}})
    assert images.resolve(own).spec["securityContext"]["runAsUser"] == 5
    by_pod = images.resolve(container("example.com/app:1"), pod_user=True)
    assert "runAsUser" not in (by_pod.spec.get("securityContext") or {})
    with pytest.raises(ValueError, match="user must be a uid"):
        table({"example.com/app": {"entrypoint": ["app"], "user": "root"}})


def test_an_images_files_are_absolute_and_listed_per_pod() -> None:
    images = table({"example.com/tool": {"cmd": ["sh"], "files": {"/opt/run": "/srv/run"}}})
    with pytest.raises(ValueError, match="files must map absolute paths"):
        table({"example.com/tool": {"files": {"opt/run": "/srv/run"}}})
    tool = container("example.com/tool")
    pod = PodConfig(PodRef("ns", "p", "u"), {}, (), (tool, container("busybox")), ())
    assert images.files(pod) == [("/opt/run", "/srv/run")]


def test_the_nonewprivs_image_prints_its_effective_uid() -> None:
    """Kubernetes' nonewprivs test image runs a set-uid root program that prints its
    effective uid; on this node privileges are never raised (no_new_privs), so the
    stand-in prints the container's own uid, which is what that program would."""
    resolved = table().resolve(container("registry.k8s.io/e2e-test-images/nonewprivs:1.3"))
    assert run(resolved.argv, dict(resolved.env)) == f"Effective uid: {os.geteuid()}\n"
