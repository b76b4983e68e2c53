"""Stand-in for the pause image: waits until it is told to stop, then exits 0.

Run as a plain script (`python -I -S pause.py`): standard library only, nothing of
vkpy. SIGTERM and SIGINT end it cleanly, as they end the real pause program.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
