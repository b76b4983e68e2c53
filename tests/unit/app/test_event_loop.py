"""`--event-loop`: the standard loop or uvloop, and a clear error when it cannot be had."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from vkpy.app import event_loop


def test_auto_takes_uvloop_when_installed() -> None:
    assert event_loop.available("uvloop")  # the dev extra installs it
    assert event_loop.resolve("auto") == "uvloop"
    assert event_loop.resolve("asyncio") == "asyncio"


def test_the_uvloop_factory_runs_coroutines_on_uvloop() -> None:
    async def loop_type() -> str:
        return type(asyncio.get_running_loop()).__module__

    factory = event_loop.loop_factory("uvloop")
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(loop_type()).startswith("uvloop")
    assert event_loop.loop_factory("asyncio") is None


def test_unknown_or_missing_loops_are_usage_errors() -> None:
    with pytest.raises(event_loop.EventLoopError, match="choose from auto, asyncio, uvloop"):
        event_loop.resolve("trio")


def test_asking_for_uvloop_without_it_exits_2_with_the_install_hint(tmp_path: Path) -> None:
    """Run as a user would, with uvloop hidden from the interpreter."""
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    code = (
        "import sys; sys.modules['uvloop'] = None\n"
        "import importlib.util, builtins\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n == 'uvloop' else real(n, *a)\n"
        "from vkpy.app.cli import main\n"
        f"sys.exit(main(['--kubeconfig={config}', '--provider=sim', '--event-loop=uvloop']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'vkpy[uvloop]'" in done.stderr
