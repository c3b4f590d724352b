"""Console progress of the search and training loops (``nas-search``, ``nas-train``).

One start line names the run folder and the key settings. A terminal then gets tqdm bars (on
stderr); output that is not a terminal (nohup, SLURM, CI logs) gets instead a plain line on
stdout every ``log_every`` steps: the step, the loss, images/s since the previous line and the
estimated time left. In a Jupyter notebook (``nas.search`` / ``nas.train`` from a notebook)
the bars are notebook widgets (``tqdm.auto``) where ipywidgets is installed, else the plain
lines. ``NAS_PROGRESS=bar|lines|both|none`` overrides the choice. Only the process that prints
(rank 0) shows anything.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

_MODES = ("bar", "lines", "both", "none")


def check_mode() -> None:
    """Refuse a ``NAS_PROGRESS`` value that is not a mode (one line), before a run starts."""
    _modes()


def _modes() -> tuple[bool, bool]:
    """(tqdm bar, plain lines) for this process's streams."""
    mode = os.environ.get("NAS_PROGRESS", "").strip().lower()
    if mode and mode not in _MODES:
        raise ValueError(f"NAS_PROGRESS={mode!r}; expected one of {', '.join(_MODES)}")
    if mode:
        return mode in ("bar", "both"), mode in ("lines", "both")
    if _in_notebook():
        return _has_widgets(), not _has_widgets()
    return sys.stderr.isatty(), not sys.stdout.isatty()


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (its output goes to a notebook's cells)."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return get is not None and type(get()).__name__ == "ZMQInteractiveShell"


def _has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401  (tqdm.auto's notebook bars need it)
    except ImportError:
        return False
    return True


def _bar(**kwargs: Any) -> Any:
    """A tqdm bar: a notebook widget in a Jupyter kernel, else text on stderr."""
    if _in_notebook():
        from tqdm.auto import tqdm as auto_tqdm

        return auto_tqdm(**kwargs)
    return tqdm(file=sys.stderr, **kwargs)


def format_duration(seconds: float) -> str:
    """``1:02:03`` / ``2:03``; ``?`` before there is anything to go on."""
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def start_line(
    program: str, run_dir: str | Path, cfg: DictConfig, keys: list[str], **extra: Any
) -> str:
    """``<program>: run folder <abs path>; key=value ...`` for ``keys`` of ``cfg`` and the
    ``extra`` values (keys absent from ``cfg`` and None extras are left out)."""
    values = []
    for key in keys:
        value = OmegaConf.select(cfg, key, default="<absent>")
        if value == "<absent>":
            continue
        if isinstance(value, DictConfig):
            continue
        values.append(f"{key}={value}")
    values += [f"{k}={v}" for k, v in extra.items() if v is not None]
    return f"{program}: run folder {Path(run_dir).absolute()}; " + " ".join(values)


class Progress:
    """A tqdm-compatible progress object for one pass of ``total`` steps.

    ``update(1, images=n, loss=x)`` after each step; ``first_step`` is the global step before
    the pass (lines print at global steps that are multiples of ``log_every``);
    ``steps_after`` the steps still to come after this pass (other epochs), for the ETA.
    """

    def __init__(
        self,
        *,
        total: int,
        initial: int = 0,
        desc: str = "",
        enabled: bool = True,
        log_every: int = 10,
        first_step: int = 0,
        steps_after: int = 0,
        stream: Any = None,
    ) -> None:
        use_bar, use_lines = _modes() if enabled else (False, False)
        self.bar = _bar(total=total, initial=initial, desc=desc, leave=False) if use_bar else None
        self.lines = use_lines
        self.stream = stream
        self.total, self.done, self.desc = total, initial, desc
        self.log_every = max(1, int(log_every))
        self.step = first_step
        self.steps_after = steps_after
        self.t0 = self._t_last = time.perf_counter()
        self.steps_timed = 0
        self._images_since = 0
        self._counts_images = False  # a pass of images (img/s shown) or of other units

    def update(self, n: int = 1, *, images: int = 0, loss: float | None = None) -> None:
        self.done += n
        self.step += n
        self.steps_timed += n
        self._images_since += images
        self._counts_images = self._counts_images or images > 0
        if self.bar is not None:
            self.bar.update(n)
            if loss is not None:
                self.bar.set_postfix(loss=f"{loss:.3f}")
        if self.lines and self.step % self.log_every == 0:
            print(self.line(loss), file=self.stream or sys.stdout, flush=True)

    def line(self, loss: float | None) -> str:
        now = time.perf_counter()
        per_step = (now - self.t0) / max(self.steps_timed, 1)
        left = (self.total - self.done + self.steps_after) * per_step
        images_per_s = self._images_since / max(now - self._t_last, 1e-9)
        self._t_last, self._images_since = now, 0
        parts = [
            f"{self.desc}  step {self.step} ({self.done}/{self.total})".strip(),
            f"loss {loss:.4f}" if loss is not None else "",
            f"{images_per_s:.1f} img/s" if self._counts_images else "",
            f"ETA {format_duration(left)}",
        ]
        return "  ".join(p for p in parts if p)

    def set_postfix(self, **values: Any) -> None:
        if self.bar is not None:
            self.bar.set_postfix(**values)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
