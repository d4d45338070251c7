"""``statestore serve`` in a child process whose files may be capped, for the disk-full tests.

``python -m tests.faults.service_child CONFIG LOG_LEVEL [MAX_FILE_BYTES SPACE_FILE]``: with a cap, every file
the process writes is limited to ``MAX_FILE_BYTES`` (``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored, so
a write past it fails with ``EFBIG`` as a full disk fails with ``ENOSPC``); once ``SPACE_FILE``
exists the cap is lifted, as when an operator frees space. Then it runs the real CLI.
"""

from __future__ import annotations

import resource
import signal
import sys
import threading
import time
from pathlib import Path

from service.cli import main


def _lift_when(space_file: Path) -> None:
    while not space_file.exists():
        time.sleep(0.05)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def run(argv: list[str]) -> int:
    config, log_level = argv[0], argv[1]
    if len(argv) == 4:
        max_file_bytes, space_file = int(argv[2]), Path(argv[3])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, hard))
        threading.Thread(target=_lift_when, args=(space_file,), daemon=True).start()
    return main(["--log-level", log_level, "serve", "--config", config])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
