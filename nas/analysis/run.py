"""Reading a finished (or running) search's run folder for analysis.

Analysis layer, after the pipeline (``search -> selection -> genotype``): everything here reads
what ``nas-search`` wrote and never changes it. A run folder holds ``config.yaml``,
``metrics.jsonl`` (events ``step``, ``epoch`` with the argmax ``genotype`` and, for NB201, the
``nb201/<dataset>/<split>`` accuracies, ``arch_weights`` with the [edges, ops] weights of every
cell type each epoch, and whatever the plug-ins log, such as a selector's decisions),
``genotype.json`` and ``checkpoints/last.pt``. Any of them may be missing (a run still going, a
folder copied without its checkpoint): the loader then leaves the matching fields empty instead
of failing.

What is particular to a plug-in is asked of its class, named by the config's ``_target_``
(``RunData.strategy_class``, ``RunData.selector_class``): the concentrations a strategy declares
(``SearchStrategy.concentrations_of``), the event a selector logs per decision and what its
scores measure (``Selector.decision_event``, ``Selector.decision_metric``). Analysis names no
plug-in; a class that cannot be imported (a user's plug-in not on the path) only removes what it
would have answered.

Shapes: ``weights_TEO`` = [epochs, edges, ops] (one row per ``arch_weights`` event),
``weights_EO`` = [edges, ops].
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import OmegaConf

from nas.bench import SEARCH_LOG_PREFIX
from nas.choices import target_name
from search_spaces.genotype import (
    AnyGenotype,
    family_of_cell_types,
    genotype_from_json,
    genotype_type,
    parse_genotype,
)
from search_spaces.space import SPACE_NAMES, Space, get_space

if TYPE_CHECKING:
    from nas.selection.base import Selector
    from nas.strategies.base import SearchStrategy

NB201_KEY_PREFIX = SEARCH_LOG_PREFIX  # the benchmark accuracies a search logs


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events of a ``metrics.jsonl``; [] if absent. The last line may be torn by a kill
    and is then skipped; any other line that is not a JSON object is a ``ValueError`` naming
    the file and the line."""
    path = Path(path)
    if not path.is_file():
        return []
    events = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):
                continue  # a line torn by a kill: the run rewrites it on resume
            raise ValueError(
                f"{path}, line {n}: not a JSON event ({e.msg}); expected one JSON object per "
                "line as nas-search writes them"
            ) from None
        if isinstance(event, dict):
            events.append(event)
    return events


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved config a run saved (``config.yaml``) as plain containers; {} if absent."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return {}
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # a torn or hand-edited file: analysis goes on without it
        return {}
    return data if isinstance(data, dict) else {}  # type: ignore[return-value]


def plugin_class(config: dict[str, Any], group: str) -> type | None:
    """The class ``config[group]["_target_"]`` names (``group``: ``search`` or ``selection``),
    imported; None without a ``_target_`` or when it cannot be imported (a user's plug-in not
    on the path, a module that fails to import). Importing a plug-in usually imports torch."""
    node = config.get(group) if isinstance(config, dict) else None
    target = node.get("_target_") if isinstance(node, dict) else None
    if not isinstance(target, str) or not target:
        return None
    from hydra.utils import get_class  # only when a plug-in is asked something

    try:
        return get_class(target)
    except Exception:  # not importable here: analysis goes on without what it would answer
        return None


def read_genotype_record(path: str | Path) -> dict[str, Any] | None:
    """``genotype.json`` of a run (space, genotype JSON, text, selector, strategy, NB201 index)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{path} is not JSON ({e}); expected the genotype.json nas-search writes (move it "
            "away to plot the rest of the run)"
        ) from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a {type(record).__name__}; expected a JSON object")
    return record


def genotype_from_record(record: dict[str, Any]) -> AnyGenotype:
    """The genotype of a ``genotype.json`` record (or of a bare ``genotype.to_json()``)."""
    if "genotype" in record:
        data = record["genotype"]
        return genotype_from_json(data) if isinstance(data, dict) else parse_genotype(str(data))
    if "type" in record:
        return genotype_from_json(record)
    if "text" in record:
        return parse_genotype(str(record["text"]))
    raise ValueError(
        "genotype JSON holds neither 'genotype', 'type' nor 'text'; expected a run's "
        "genotype.json or genotype.to_json()"
    )


@dataclass
class RunData:
    """What one run folder says, parsed once. Fields are empty where an artefact is missing."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] | None = None
    genotype: AnyGenotype | None = None  # the selected genotype (genotype.json)

    # -------------------------------------------------------------------- identity

    def _cfg(self, *keys: str) -> Any:
        node: Any = self.config
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return None
            node = node[k]
        return node

    @property
    def space_name(self) -> str | None:
        name = self._cfg("space", "name") or (self.record or {}).get("space")
        if name is None and (self.genotype is not None or self.arch_weights):
            name = genotype_type(self._guessed_family).space_name  # the family's reference space
        return str(name) if name is not None else None

    @property
    def _guessed_family(self) -> str:
        """The family of the selected genotype, else of the logged weights' cell types."""
        if self.genotype is not None:
            return self.genotype.family
        return family_of_cell_types(self.arch_weights)

    @property
    def family(self) -> str:
        """The space family (``Space.family``): the run's space's, else guessed from the
        selected genotype or the logged weights' cell types."""
        space = self.space
        return space.family if space is not None else self._guessed_family

    @property
    def space(self) -> Space | None:
        name = self.space_name
        return get_space(name) if name in SPACE_NAMES else None

    @property
    def strategy(self) -> str | None:
        # configs written before plug-ins were named by their files carry a ``name`` key
        name = (self.record or {}).get("strategy") or self._cfg("search", "name")
        if name is None and self.config is not None:
            name = target_name(self.config, "search") or None
        return str(name) if name is not None else None

    @property
    def selector(self) -> str | None:
        name = (self.record or {}).get("selector") or self._cfg("selection", "name")
        if name is None and self.config is not None:
            name = target_name(self.config, "selection") or None
        return str(name) if name is not None else None

    @cached_property
    def strategy_class(self) -> type[SearchStrategy] | None:
        """The search strategy's class (the config's ``search._target_``), None where it is not
        recorded or cannot be imported."""
        from nas.strategies.base import SearchStrategy

        cls = plugin_class(self.config, "search")
        return cls if isinstance(cls, type) and issubclass(cls, SearchStrategy) else None

    @cached_property
    def selector_class(self) -> type[Selector] | None:
        """The selector's class (the config's ``selection._target_``), None where it is not
        recorded or cannot be imported."""
        from nas.selection.base import Selector

        cls = plugin_class(self.config, "selection")
        return cls if isinstance(cls, type) and issubclass(cls, Selector) else None

    @property
    def seed(self) -> int | None:
        seed = self._cfg("seed")
        return int(seed) if isinstance(seed, int) else None

    @property
    def components(self) -> list[str]:
        """The search components the run listed (``components=[...]``), in order."""
        node = self._cfg("components")
        return [str(k) for k in node] if isinstance(node, dict) else []

    @property
    def method(self) -> str:
        """``<strategy>+<selector>``, e.g. ``darts+pt`` (``fix-alpha`` when alpha was frozen;
        the components in brackets: ``darts[sdarts_rs]+argmax``; ``?`` for a part the run
        does not record)."""
        strategy = self.strategy or "?"
        if self._cfg("search", "fix_alpha"):
            strategy += "(fix-alpha)"
        if self.components:
            strategy += f"[{','.join(self.components)}]"
        return f"{strategy}+{self.selector or '?'}"

    def genotype_per_epoch(self) -> list[tuple[int, AnyGenotype]]:
        """(1-based epoch, the argmax genotype logged at its end), for every epoch event."""
        out = []
        for e in self.epochs:
            if isinstance(e.get("genotype"), str):
                try:
                    out.append((int(e["epoch"]) + 1, parse_genotype(e["genotype"])))
                except ValueError:
                    continue
        return out

    @property
    def label(self) -> str:
        """A short name for legends: ``nb201 darts+pt seed0``."""
        parts = [self.space_name or "?", self.method]
        if self.seed is not None:
            parts.append(f"seed{self.seed}")
        return " ".join(parts)

    # ---------------------------------------------------------------------- events

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def epochs(self) -> list[dict[str, Any]]:
        """The ``epoch`` events (one per search epoch, in order)."""
        return self.events_of("epoch")

    @property
    def decision_event(self) -> str | None:
        """The event the run's selector logs once per decision (``Selector.decision_event``);
        None for a selector that logs none, or a run whose selector class is unknown."""
        cls = self.selector_class
        event = cls.decision_event if cls is not None else None
        return event if isinstance(event, str) and event else None

    @property
    def decisions(self) -> list[dict[str, Any]]:
        """The selector's logged decisions, in order ([] where it logs none)."""
        event = self.decision_event
        return self.events_of(event) if event is not None else []

    @property
    def decision_metric(self) -> str:
        """What the decisions' scores measure, ``"acc"`` or ``"loss"``
        (``Selector.decision_metric`` of the run's ``selection`` config)."""
        cls = self.selector_class
        if cls is None:
            return "acc"
        node = self._cfg("selection")
        return str(cls.decision_metric(node if isinstance(node, dict) else {}))

    @property
    def last_step(self) -> int:
        steps = [int(e["step"]) for e in self.events if isinstance(e.get("step"), int)]
        return max(steps, default=0)

    @property
    def weight_epochs(self) -> list[int]:
        """The (0-based) epoch of each row of ``arch_weights``'s arrays."""
        return [int(e["epoch"]) for e in self.events_of("arch_weights")]

    @cached_property
    def arch_weights(self) -> dict[str, np.ndarray]:
        """Cell type -> ``weights_TEO``, the logged architecture weights of every epoch."""
        rows = self.events_of("arch_weights")
        if not rows:
            return {}
        cell_types = [k for k in rows[0] if k not in ("event", "epoch", "step")]
        out = {}
        for ct in cell_types:
            try:
                out[ct] = np.asarray([r[ct] for r in rows], dtype=float)
            except (KeyError, ValueError):  # an inconsistent log: keep the cell types that parse
                continue
        return out

    @property
    def final_weights(self) -> dict[str, np.ndarray]:
        """Cell type -> ``weights_EO`` of the last logged epoch (the end of the search)."""
        return {ct: w[-1] for ct, w in self.arch_weights.items()}

    @property
    def preview_genotype(self) -> AnyGenotype | None:
        """The argmax genotype logged at the last epoch (before any other selection)."""
        for e in reversed(self.epochs):
            if isinstance(e.get("genotype"), str):
                try:
                    return parse_genotype(e["genotype"])
                except ValueError:
                    return None
        return None

    @property
    def final_genotype(self) -> AnyGenotype | None:
        """The selected genotype, else the last argmax preview of a run without one yet."""
        return self.genotype if self.genotype is not None else self.preview_genotype

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(1-based epochs, values) of a numeric key of the ``epoch`` events."""
        xs, ys = [], []
        for e in self.epochs:
            value = e.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                xs.append(int(e["epoch"]) + 1)
                ys.append(float(value))
        return xs, ys

    @property
    def nb201_keys(self) -> list[str]:
        """The ``nb201/<dataset>/<split>`` keys logged every epoch (NB201 searches only)."""
        keys: dict[str, None] = {}
        for e in self.epochs:
            keys.update(dict.fromkeys(k for k in e if k.startswith(NB201_KEY_PREFIX)))
        return list(keys)

    # ----------------------------------------------------------------- checkpoint

    def checkpoint_arch(self) -> dict[str, dict[str, np.ndarray]]:
        """From ``checkpoints/last.pt``: ``{"params": ct -> the strategy's architecture
        parameters [edges, ops], "masks": ct -> bool_EO}``; empty dicts when there is no
        readable checkpoint."""
        return load_checkpoint_arch(self.path / "checkpoints" / "last.pt")

    def concentrations(self) -> dict[str, np.ndarray]:
        """Cell type -> the concentrations [edges, ops] the run's strategy declares for its
        architecture parameters at the end (``SearchStrategy.concentrations_of`` of the
        checkpoint's); {} where it declares none, its class is unknown or there is no
        checkpoint. Masked (pruned) ops are NaN."""
        cls = self.strategy_class
        if cls is None:
            return {}
        arch = self.checkpoint_arch()
        if not arch["params"]:
            return {}
        import torch  # a strategy's concentrations are a function of tensors

        out = {}
        for ct, params in arch["params"].items():
            with torch.no_grad():
                values = cls.concentrations_of(torch.tensor(params))
            if values is None:
                return {}
            conc = values.detach().cpu().double().numpy()
            mask = arch["masks"].get(ct)
            if mask is not None and mask.shape == conc.shape:
                conc = np.where(mask, conc, np.nan)
            out[ct] = conc
        return out


def load_checkpoint_arch(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """Architecture parameters (``strategy.module.arch_params.<ct>``) and op masks
    (``supernet.mask_<ct>``) of a search checkpoint, as arrays; empty where unreadable."""
    out: dict[str, dict[str, np.ndarray]] = {"params": {}, "masks": {}}
    path = Path(path)
    if not path.is_file():
        return out
    import torch  # only to read a checkpoint: nas.analysis itself runs without torch

    try:
        try:  # mmap: only the few tensors read here are paged in, even for a big supernet
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a torn or foreign file: no checkpoint figures, nothing else lost
        return out
    module = (state.get("strategy") or {}).get("module") or {}
    for key, value in module.items():
        if key.startswith("arch_params."):
            out["params"][key.split(".", 1)[1]] = value.detach().float().cpu().numpy()
    for key, value in (state.get("supernet") or {}).items():
        if key.startswith("mask_") and "." not in key:
            out["masks"][key[len("mask_") :]] = value.detach().cpu().numpy().astype(bool)
    return out


def load_run(path: str | Path) -> RunData:
    """Parse a run folder. Raises ``FileNotFoundError`` if it is not a folder; every artefact
    inside it is optional."""
    run_dir = Path(path).expanduser()
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist (or is not a folder)")
    # a genotype.json that cannot be read is an error, not a missing genotype: the figures of
    # another cell (the last argmax) must not replace the selected one's
    record = read_genotype_record(run_dir / "genotype.json")
    genotype = None
    if record is not None:
        try:
            genotype = genotype_from_record(record)
        except ValueError as e:
            raise ValueError(f"{run_dir / 'genotype.json'}: {e}") from None
    return RunData(
        path=run_dir,
        config=read_config(run_dir),
        events=read_events(run_dir / "metrics.jsonl"),
        record=record,
        genotype=genotype,
    )


def is_run_dir(path: str | Path) -> bool:
    """Whether a folder looks like a ``nas-search`` run folder."""
    p = Path(path)
    return p.is_dir() and any(
        (p / name).exists() for name in ("metrics.jsonl", "genotype.json", "config.yaml")
    )


def find_runs(patterns: str | Iterable[str | Path]) -> list[Path]:
    """Run folders matching glob patterns (a string may hold several, separated by
    ``os.pathsep`` or commas), sorted, each once. A folder that holds run folders is searched."""
    if isinstance(patterns, str):
        items: list[str | Path] = [
            p for chunk in patterns.split(os.pathsep) for p in chunk.split(",") if p.strip()
        ]
    else:
        items = list(patterns)
    found: dict[Path, None] = {}
    for item in items:
        for match in sorted(glob.glob(os.path.expanduser(str(item).strip()))):
            p = Path(match)
            if is_run_dir(p):
                found[p] = None
            elif p.is_dir():
                for sub in sorted(p.rglob("metrics.jsonl")):
                    found[sub.parent] = None
    return list(found)


def load_runs(paths: Sequence[str | Path] | str) -> list[RunData]:
    """``load_run`` for every folder (or for every run ``find_runs`` finds in a pattern)."""
    folders = find_runs(paths) if isinstance(paths, str) else [Path(p) for p in paths]
    return [load_run(p) for p in folders]


__all__ = [
    "RunData",
    "find_runs",
    "genotype_from_record",
    "is_run_dir",
    "load_checkpoint_arch",
    "load_run",
    "load_runs",
    "plugin_class",
    "read_config",
    "read_events",
    "read_genotype_record",
]
