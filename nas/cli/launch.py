"""What ``nas-search`` and ``nas-train`` share about their processes: exit codes, which process
prints, and the one-line error exit. Read from torchrun's environment variables, so that it
works before any process group exists (a config error stops every process the same way)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a job killed by SIGTERM reports


def reports_errors() -> bool:
    """Whether this process prints errors: the first process of each machine (errors about
    data are per machine), or the only process."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def is_rank0() -> bool:
    """Whether this process prints results (rank 0, or the only process)."""
    return os.environ.get("RANK", "0") == "0"


def fail(program: str, message: str) -> NoReturn:
    """``<program>: error: <message>`` on stderr (once per machine) and exit code 2."""
    if reports_errors():
        print(f"{program}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def exit_preempted(program: str, checkpoint: Path, run_dir: Path) -> NoReturn:
    """After SIGTERM: say where the checkpoint is and how to resume (rank 0), exit with 143."""
    if is_rank0():
        from hydra.core.hydra_config import HydraConfig

        overrides = " ".join(HydraConfig.get().overrides.task)
        print(
            f"{program}: preempted; checkpoint written to {checkpoint}. Resume with: "
            f"{program} {overrides} hydra.run.dir={run_dir} resume=true".replace("  ", " "),
            file=sys.stderr,
            flush=True,
        )
    sys.exit(EXIT_PREEMPTED)


def set_on_command_line(*keys: str) -> list[str]:
    """Which of ``keys`` the command line set (Hydra's task overrides); [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    given = {o.partition("=")[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
    return [key for key in keys if key in given]
