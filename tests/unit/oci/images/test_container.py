"""An image's config combined with a container's spec by Kubernetes' rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from vkpy.oci.images.config import ImageConfig, ImageConfigError
from vkpy.oci.images.container import (
    ContainerConfigError,
    User,
    command_line,
    environment,
    user,
    working_dir,
)

IMAGE = ImageConfig(entrypoint=("/ep",), cmd=("cmd-a", "cmd-b"), env=("PATH=/bin", "A=image"))


@pytest.mark.parametrize(
    ("command", "args", "argv"),
    [
        ([], [], ["/ep", "cmd-a", "cmd-b"]),  # neither: ENTRYPOINT + CMD
        (["/run"], [], ["/run"]),  # command replaces ENTRYPOINT and drops CMD
        ([], ["x", "y"], ["/ep", "x", "y"]),  # args replace CMD
        (["/run"], ["x"], ["/run", "x"]),  # both: only the spec
    ],
)
def test_command_and_args_table(command: list[str], args: list[str], argv: list[str]) -> None:
    assert command_line(IMAGE, command, args) == argv


def test_cmd_alone_and_no_command_at_all() -> None:
    assert command_line(ImageConfig(cmd=("sh",)), [], []) == ["sh"]
    assert command_line(ImageConfig(cmd=("sh",)), [], ["-c", "id"]) == ["-c", "id"]
    with pytest.raises(ContainerConfigError, match="no command specified"):
        command_line(ImageConfig(), [], [])


def test_env_image_first_container_overrides_in_place() -> None:
    merged = environment(IMAGE, [("A", "pod"), ("B", "new"), ("PATH", "/usr/bin")])
    assert merged == [("PATH", "/usr/bin"), ("A", "pod"), ("B", "new")]


def test_working_dir() -> None:
    assert working_dir(ImageConfig(working_dir="/app"), None) == "/app"
    assert working_dir(ImageConfig(working_dir="/app"), "/data") == "/data"
    assert working_dir(ImageConfig(), None) == "/"


def test_config_parsed_from_the_document() -> None:
    doc = {
        "architecture": "arm64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/e"],
            "Cmd": None,
            "Env": ["X=1", "EMPTY"],
            "WorkingDir": "/w",
            "User": "app:staff",
            "StopSignal": "SIGQUIT",
        },
    }
    config = ImageConfig.from_json(doc)
    assert config == ImageConfig(
        entrypoint=("/e",),
        env=("X=1", "EMPTY"),
        working_dir="/w",
        user="app:staff",
        architecture="arm64",
        os="linux",
        stop_signal="SIGQUIT",
    )
    assert config.env_pairs() == [("X", "1"), ("EMPTY", "")]
    assert ImageConfig.from_json({}) == ImageConfig()
    with pytest.raises(ImageConfigError, match="Cmd"):
        ImageConfig.from_json({"config": {"Cmd": "sh -c x"}})


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text(
        "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n"
    )
    (tmp_path / "etc/group").write_text("root:x:0:\napp:x:1001:\nstaff:x:50:app\nwheel:x:10:app\n")
    return tmp_path


def test_user_from_the_image(rootfs: Path) -> None:
    assert user(ImageConfig(), rootfs) == User(0, 0)
    assert user(ImageConfig(user="app"), rootfs) == User(1000, 1001, (50, 10))
    assert user(ImageConfig(user="app:staff"), rootfs) == User(1000, 50, (10,))
    assert user(ImageConfig(user="1234"), rootfs) == User(1234, 0)
    assert user(ImageConfig(user="1234:77"), rootfs) == User(1234, 77)
    with pytest.raises(ContainerConfigError, match="unable to find user ghost"):
        user(ImageConfig(user="ghost"), rootfs)
    with pytest.raises(ContainerConfigError, match="unable to find group ghosts"):
        user(ImageConfig(user="app:ghosts"), rootfs)


def test_security_context_wins(rootfs: Path) -> None:
    assert user(ImageConfig(user="app"), rootfs, run_as_user=0) == User(0, 0)
    assert user(ImageConfig(user="app"), rootfs, run_as_user=10001) == User(10001, 0)
    assert user(ImageConfig(user="app"), rootfs, run_as_group=5) == User(1000, 5, (50, 10))
    assert user(ImageConfig(), rootfs, run_as_user=1000, run_as_group=7) == User(1000, 7, (50, 10))


def test_run_as_non_root(rootfs: Path) -> None:
    with pytest.raises(ContainerConfigError, match="image will run as root"):
        user(ImageConfig(), rootfs, run_as_non_root=True)
    with pytest.raises(ContainerConfigError, match="non-numeric user \\(app\\)"):
        user(ImageConfig(user="app"), rootfs, run_as_non_root=True)
    with pytest.raises(ContainerConfigError, match="runAsUser breaks non-root policy"):
        user(ImageConfig(user="1000"), rootfs, run_as_user=0, run_as_non_root=True)
    assert user(ImageConfig(user="1000"), rootfs, run_as_non_root=True).uid == 1000
    assert user(ImageConfig(user="app"), rootfs, run_as_user=5, run_as_non_root=True).uid == 5
