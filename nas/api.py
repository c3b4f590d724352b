"""The Python API: ``nas.search``, ``nas.train`` and ``nas.load_run``.

The same runs as the command lines, from a script or a notebook. ``nas.search(space="nb201",
strategy="drnas", overrides={"epochs": 10})`` is ``nas-search space=nb201 search=drnas
epochs=10``: the keyword arguments become the same overrides, which go through the same
checks (``nas.cli.search.prepare``), the same composition of the same config folders (Hydra's
compose API, ``nas.cli.job``), the same locked run folder, checkpoints, logs and resume
(``nas.cli.search.search_job``), in this process. Only the ending differs: where the command
prints one line and exits with code 2, the API raises ``RunError`` with that line; where the
command exits after a stop request (Ctrl-C, SIGTERM), the API raises ``Stopped``, naming the
checkpoint; ``resume=True`` continues the run.

``search`` and ``train`` return a ``Run``: what the run folder says (``load_run`` reads any
run folder, finished or stopped, searched or trained): the genotype, the per-epoch records (a
pandas DataFrame with ``Run.dataframe()`` where pandas is installed), the final results of a
training, the NAS-Bench-201 accuracies of a searched NB201 cell. ``nas.api.search_config`` /
``train_config`` return the config a run would use, composed and checked, without running.

A value given in ``overrides={...}`` reaches the config as given: ``{"data.root": "/data/a,b"}``
sets that one path, where the command line would read ``a,b`` as a sweep. An argument of a
type the function does not take (``overrides=42``, ``components="pc_darts"``,
``genotype=3.5``) is refused with a ``RunError`` naming the parameter and the types it takes,
and a bad name (``space="nope"``) before torch is imported.

One run at a time in a process: Hydra's config of the running job and the global random
generators that a run seeds are shared by all of a process's threads, so a second
``search`` / ``train`` (or ``*_config``) called while one runs, from another thread, is refused
with a ``RunError``. Runs side by side go in separate processes (``multiprocessing``,
``subprocess``, one ``nas-search`` each), whose folders, locks, logs and trackers are their own.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nas.cli import launch
from nas.cli.config_check import CommandLineError
from nas.cli.job import compose_job, job_context
from nas.cli.launch import RunRefused, RunStopped

__all__ = [
    "Run",
    "RunError",
    "Stopped",
    "load_run",
    "search",
    "search_config",
    "train",
    "train_config",
]

Overrides = Sequence[str] | Mapping[str, Any]

# One run (or composition) at a time in a process: Hydra's config of the running job
# (``HydraConfig``) and the global random generators that ``seed_everything`` seeds are shared
# by every thread, so two runs in threads of one process would read each other's. A second
# call while one holds this lock is refused with one line; runs side by side go in separate
# processes (each its own ``nas.search`` / ``nas-search``), which share nothing.
_ONE_RUN = threading.Lock()


class RunError(ValueError):
    """A run that was refused: the one line ``nas-search`` / ``nas-train`` would print after
    ``error:``, for the same input. Nothing is left behind by a run refused before its first
    checkpoint in a folder it created."""


class Stopped(Exception):
    """A stop request (Ctrl-C, the kernel's interrupt button, SIGTERM) ended the run.
    ``checkpoint`` is the checkpoint it wrote at the step boundary (None if a second Ctrl-C
    stopped it before any); the same call with ``resume=True`` continues the run."""

    def __init__(self, message: str, checkpoint: Path | None, run_dir: Path) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint
        self.run_dir = run_dir


# --------------------------------------------------------------------------- the results


@dataclass
class Run:
    """What a run folder says: a search's or a training's, finished or stopped.

    ``kind``: ``"search"`` or ``"train"``. ``finished``: a search wrote its genotype, a
    training its ``results.json``. ``events``: every line of ``metrics.jsonl`` (``epochs`` holds
    the per-epoch ones). ``results``: a training's ``results.json`` (parameters,
    multiply-adds, final and best accuracies); empty for a search and for a training that has not
    finished (a dict either way, so ``run.results["final"]`` type-checks in user code).
    """

    path: Path
    kind: str
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    genotype: Any = None
    finished: bool = False
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)
    results: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """One record per epoch (loss, accuracies, learning rate, images/s; a search's epoch
        also its argmax genotype and, in NB201, that cell's benchmark accuracies)."""
        return [e for e in self.events if e.get("event") == "epoch"]

    @property
    def checkpoint(self) -> Path | None:
        """The last checkpoint (``resume=True`` continues from it), None if there is none."""
        path = self.path / "checkpoints" / "last.pt"
        return path if path.is_file() else None

    @property
    def benchmark(self) -> dict[str, float]:
        """NAS-Bench-201's accuracies of the genotype (``nb201/<data set>/<split>``: top-1 %,
        mean of the benchmark's 200-epoch runs); {} where the benchmark does not apply."""
        if self.genotype is None:
            return {}
        from nas.pipeline.search import nb201_accuracies

        return dict(nb201_accuracies(self.genotype))

    def dataframe(self, event: str = "epoch") -> Any:
        """The records of one event kind (``epoch``, ``step``, ...) as a pandas DataFrame."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Run.dataframe needs pandas (pip install pandas); Run.epochs holds the same "
                "records as dictionaries"
            ) from None
        return pd.DataFrame([e for e in self.events if e.get("event") == event])


def load_run(path: str | Path) -> Run:
    """Read a run folder of ``nas-search`` or ``nas-train`` (or of ``nas.search`` /
    ``nas.train``), finished or stopped. ``RunError`` if it is not one, or if a file in it
    cannot be read (naming the file)."""
    from nas.analysis.run import read_config, read_events, read_genotype_record

    run_dir = Path(path).expanduser()
    if not run_dir.is_dir():
        raise RunError(f"run folder {run_dir} does not exist (or is not a folder)")
    config = read_config(run_dir)
    if not config and not (run_dir / "metrics.jsonl").is_file():
        raise RunError(
            f"{run_dir} is not a run folder: expected the config.yaml and metrics.jsonl "
            "that nas-search and nas-train write"
        )
    try:
        events = read_events(run_dir / "metrics.jsonl")
        if "genotype" in config or (run_dir / "results.json").is_file():
            results = _read_results(run_dir / "results.json")
            genotype = _trained_genotype(results, events)
            return Run(
                run_dir, "train", config, genotype, results is not None, events, results or {}
            )
        record = read_genotype_record(run_dir / "genotype.json")
        genotype = None
        if record is not None:
            from nas.analysis.run import genotype_from_record

            genotype = genotype_from_record(record)
    except ValueError as e:
        raise RunError(str(e).splitlines()[0]) from None
    return Run(run_dir, "search", config, genotype, record is not None, events)


def _read_results(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not JSON ({e}); expected the results nas-train writes"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}; expected a JSON object")
    return data


def _trained_genotype(results: dict[str, Any] | None, events: list[dict[str, Any]]) -> Any:
    """The genotype a training ran: from its results, else from its ``model`` event."""
    from search_spaces.genotype import genotype_from_json, parse_genotype

    if results and isinstance(results.get("genotype_json"), dict):
        return genotype_from_json(results["genotype_json"])
    text = (results or {}).get("genotype") or next(
        (e.get("genotype") for e in events if e.get("event") == "model"), None
    )
    return parse_genotype(str(text)) if text else None


# --------------------------------------------------------------------------- the runs


def search(
    space: str | None = None,
    strategy: str | None = None,
    selection: str | None = None,
    components: Sequence[str] | None = None,
    data: str | None = None,
    *,
    cost: str | None = None,
    experiment: str | None = None,
    overrides: Overrides = (),
    run_dir: str | Path | None = None,
    resume: bool = False,
    config_dirs: Sequence[str | Path] = (),
) -> Run:
    """Run the search ``nas-search`` would run for the same settings; return its ``Run``.

    ``space``, ``strategy`` (the ``search`` group), ``selection``, ``components``, ``data``,
    ``cost`` and ``experiment`` name configs of their groups (``nas-search --help`` lists
    them); ``overrides`` sets any other value, as ``["epochs=10", "optimizer.lr=0.05"]`` or
    ``{"epochs": 10}``. Without a choice of space, strategy, selection, data or experiment the
    quickstart runs, as ``nas-search`` alone does. ``run_dir`` defaults to the command's
    ``outputs/<space>-<strategy>/seed<seed>`` (relative to the working folder);
    ``config_dirs`` are folders of the user's own configs, laid out as ``configs/``
    (``hydra.searchpath``). Raises ``RunError`` (bad input, one line) or ``Stopped``.
    """
    from nas.cli import search as command

    argv = _search_argv(space, strategy, selection, components, data, cost, experiment,
                        overrides, run_dir, resume, config_dirs)  # fmt: skip
    with _one_run("nas.search"), _as_api_errors("nas.search"), job_context():
        cfg, folder = _compose_search(argv)
        result = command.search_job(cfg, folder)
    return load_run(result.run_dir)


def search_config(
    space: str | None = None,
    strategy: str | None = None,
    selection: str | None = None,
    components: Sequence[str] | None = None,
    data: str | None = None,
    *,
    cost: str | None = None,
    experiment: str | None = None,
    overrides: Overrides = (),
    run_dir: str | Path | None = None,
    resume: bool = False,
    config_dirs: Sequence[str | Path] = (),
) -> DictConfig:
    """The config ``search`` (and ``nas-search``) would run with for these arguments, checked
    as they check it, without running anything: to read a recipe's values, or to build a
    strategy or supernet from it (``nas.plugins``). Raises ``RunError``."""
    argv = _search_argv(space, strategy, selection, components, data, cost, experiment,
                        overrides, run_dir, resume, config_dirs)  # fmt: skip
    with _one_run("nas.search_config"), _as_api_errors("nas.search_config"), job_context():
        cfg, _ = _compose_search(argv)
    return cfg


def train(
    genotype: Any = None,
    *,
    experiment: str | None = None,
    data: str | None = None,
    overrides: Overrides = (),
    run_dir: str | Path | None = None,
    resume: bool = False,
    config_dirs: Sequence[str | Path] = (),
) -> Run:
    """Retrain a genotype as ``nas-train`` would for the same settings; return its ``Run``.

    ``genotype``: a ``Run`` of a search (or its folder), a genotype object, genotype text, a
    published name (``"DARTS_V2"``), an NB201 index, or a ``genotype.json``; None keeps the
    recipe's. ``experiment`` names a training recipe (``configs/train/experiment``),
    ``data`` a data set; ``overrides`` as in ``search``. Raises ``RunError`` or ``Stopped``.
    """
    from nas.cli import train as command

    argv = _train_argv(genotype, experiment, data, overrides, run_dir, resume, config_dirs)
    with _one_run("nas.train"), _as_api_errors("nas.train"), job_context():
        cfg, folder = _compose_train(argv)
        result = command.train_job(cfg, folder)
    return load_run(result.run_dir)


def train_config(
    genotype: Any = None,
    *,
    experiment: str | None = None,
    data: str | None = None,
    overrides: Overrides = (),
    run_dir: str | Path | None = None,
    resume: bool = False,
    config_dirs: Sequence[str | Path] = (),
) -> DictConfig:
    """The config ``train`` (and ``nas-train``) would run with for these arguments, checked,
    without running anything. Raises ``RunError``."""
    argv = _train_argv(genotype, experiment, data, overrides, run_dir, resume, config_dirs)
    with _one_run("nas.train_config"), _as_api_errors("nas.train_config"), job_context():
        cfg, _ = _compose_train(argv)
    return cfg


def _search_argv(
    space: str | None,
    strategy: str | None,
    selection: str | None,
    components: Sequence[str] | None,
    data: str | None,
    cost: str | None,
    experiment: str | None,
    overrides: Overrides,
    run_dir: str | Path | None,
    resume: bool,
    config_dirs: Sequence[str | Path],
) -> list[str]:
    """``nas-search``'s command line for ``search``'s arguments."""
    for name, value in (("space", space), ("strategy", strategy), ("selection", selection),
                        ("data", data), ("cost", cost), ("experiment", experiment)):  # fmt: skip
        _check_name(name, value)
    if isinstance(components, str):
        raise RunError(f"components={components!r} is one string; expected a list of names")
    if components is not None and (
        not isinstance(components, Sequence) or not all(isinstance(c, str) for c in components)
    ):
        raise RunError(
            f"components={components!r} is {_a_type(components)}; expected a list of "
            "component names (str) or None"
        )
    _check_common(run_dir, resume, config_dirs)
    return [
        *_choice("space", space),
        *_choice("search", strategy),
        *_choice("selection", selection),
        *(["components=[" + ",".join(components) + "]"] if components is not None else []),
        *_choice("data", data),
        *_choice("cost", cost),
        *_choice("experiment", experiment),
        *_override_list(overrides),
        *_common(run_dir, resume, config_dirs),
    ]


def _compose_search(argv: list[str]) -> tuple[DictConfig, Path]:
    """``nas-search``'s checks and composition (inside ``job_context``)."""
    from nas.cli import search as command

    launch.NEW_DIRS.clear()
    return compose_job(command.CONFIG_DIR, "nas_search", command.prepare(argv))


def _train_argv(
    genotype: Any,
    experiment: str | None,
    data: str | None,
    overrides: Overrides,
    run_dir: str | Path | None,
    resume: bool,
    config_dirs: Sequence[str | Path],
) -> list[str]:
    """``nas-train``'s command line for ``train``'s arguments."""
    _check_name("experiment", experiment)
    _check_name("data", data)
    _check_common(run_dir, resume, config_dirs)
    argv = [
        *([f"genotype={_genotype_spec(genotype)}"] if genotype is not None else []),
        *_choice("experiment", experiment),
        *_choice("data", data),
        *_override_list(overrides),
        *_common(run_dir, resume, config_dirs),
    ]
    if any(a.partition("=")[0].lstrip("+") == "eval_only" for a in argv):
        raise RunError(
            "eval_only is nas-train's checkpoint evaluation, which nas.train does not run; "
            "use nas-train eval_only=true checkpoint=<run folder>"
        )
    return argv


def _compose_train(argv: list[str]) -> tuple[DictConfig, Path]:
    """``nas-train``'s checks and composition (inside ``job_context``)."""
    from nas.cli import train as command
    from nas.cli.configs import remove_stored

    launch.NEW_DIRS.clear()
    try:
        return compose_job(command.TRAIN_CONFIG_DIR, "nas_train", command.prepare(argv))
    finally:
        remove_stored("nas-train")  # the shared groups, registered for this composition


# --------------------------------------------------------------------------- helpers


def _a_type(value: Any) -> str:
    """``value``'s type with its article: "an int", "a float"."""
    name = type(value).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def _check_name(parameter: str, value: Any) -> None:
    """``RunError`` unless ``value`` is a config name (str) or None."""
    if value is not None and not isinstance(value, str):
        raise RunError(
            f"{parameter}={value!r} is {_a_type(value)}; expected a config name (str) or None"
        )


def _check_common(run_dir: Any, resume: Any, config_dirs: Any) -> None:
    """``RunError`` naming the parameter where ``run_dir``, ``resume`` or ``config_dirs`` has
    a type they do not take."""
    if run_dir is not None and not isinstance(run_dir, (str, Path)):
        raise RunError(f"run_dir={run_dir!r} is {_a_type(run_dir)}; expected a str, a Path or None")
    if not isinstance(resume, bool):
        raise RunError(f"resume={resume!r} is {_a_type(resume)}; expected True or False")
    if isinstance(config_dirs, (str, Path)) or not (
        isinstance(config_dirs, Sequence) and all(isinstance(d, (str, Path)) for d in config_dirs)
    ):
        raise RunError(
            f"config_dirs={config_dirs!r} is {_a_type(config_dirs)}; expected a list of "
            "folders (str or Path)"
        )


@contextmanager
def _one_run(function: str) -> Iterator[None]:
    """Hold the process's run lock for one call; refuse the call if another holds it."""
    if not _ONE_RUN.acquire(blocking=False):
        raise RunError(
            f"{function}: another nas.search / nas.train is running in this process; run them "
            "side by side in separate processes (one Python process or nas-search each)"
        )
    try:
        yield
    finally:
        _ONE_RUN.release()


def _choice(group: str, name: str | None) -> list[str]:
    return [] if name is None else [f"{group}={name}"]


def _value(value: Any) -> str:
    """A Python value as Hydra's override grammar writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, (Path, str)):
        return _quoted(str(value))  # "/data/a,b" stays one string, not a sweep
    return str(value)


def _quoted(text: str) -> str:
    """``text`` quoted for Hydra's grammar where it holds characters the grammar reads."""
    from nas.cli.train import _HYDRA_SPECIAL, hydra_quote

    return hydra_quote(text) if _HYDRA_SPECIAL.intersection(text) else text


def _override_list(overrides: Overrides) -> list[str]:
    if isinstance(overrides, str):
        raise RunError(
            f"overrides={overrides!r} is one string; expected a list of key=value strings or a dict"
        )
    if isinstance(overrides, Mapping):
        for key in overrides:
            if not isinstance(key, str):
                raise RunError(
                    f"overrides key {key!r} is {_a_type(key)}; expected a dotted config key (str)"
                )
        return [f"{key}={_value(value)}" for key, value in overrides.items()]
    if not isinstance(overrides, Sequence) or not all(isinstance(o, str) for o in overrides):
        raise RunError(
            f"overrides={overrides!r} is {_a_type(overrides)}; expected a list of "
            "key=value strings or a dict of values by dotted key"
        )
    return list(overrides)


def _common(
    run_dir: str | Path | None, resume: bool, config_dirs: Sequence[str | Path]
) -> list[str]:
    out = []
    if run_dir is not None:
        out.append(f"hydra.run.dir={_quoted(str(Path(run_dir).expanduser().absolute()))}")
    if resume:
        out.append("resume=true")
    if config_dirs:
        entries = [f"file://{Path(d).expanduser().absolute()}" for d in config_dirs]
        out.append(f"hydra.searchpath=[{','.join(entries)}]")
    return out


def _genotype_spec(genotype: Any) -> str:
    """What ``genotype=`` of ``nas-train`` takes, from any of ``train``'s forms."""
    if isinstance(genotype, Run):
        return str(genotype.path)
    if isinstance(genotype, Path):
        return str(genotype.expanduser().absolute())
    if isinstance(genotype, (bool, float, complex, bytes, dict, set)):
        raise RunError(
            f"genotype={genotype!r} is {_a_type(genotype)}; expected a Run, a genotype, "
            "its text (str), a published name (str), an NB201 index (int) or a path"
        )
    return str(genotype)


@contextmanager
def _as_api_errors(function: str) -> Iterator[None]:
    """The command lines' endings as exceptions: a refusal as ``RunError`` (the same line),
    a stop request as ``Stopped``."""
    try:
        yield
    except (CommandLineError, RunRefused) as e:
        raise RunError(str(e)) from None
    except RunStopped as s:
        how = "Ctrl-C" if s.signum == signal.SIGINT else signal.Signals(s.signum).name
        if s.checkpoint is None:
            message = f"{function}: stopped ({how}) before the first checkpoint"
        else:
            message = (
                f"{function}: stopped ({how}); checkpoint written to {s.checkpoint}; the same "
                "call with resume=True continues the run"
            )
        raise Stopped(message, s.checkpoint, s.run_dir) from None
