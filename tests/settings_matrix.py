"""The settings matrix: every key of every search plug-in YAML (``configs/search``,
``configs/components``, ``configs/cost``) and of the top-level search config
(``configs/nas_search.yaml``), changed from its default, on every strategy that accepts the
plug-in, in a tiny fixed-seed run. Each case must either change the result (the trained
architecture parameters and weights, the genotype, the final metrics) or be refused in one line
before the first epoch. A key that legitimately changes nothing at this size is declared in
``NO_EFFECT`` with the reason, so a new key fails the matrix until it is applied, refused or
declared.

The cases are read from the YAMLs; what is written here by hand is only how to make a tiny run
of each strategy (``BASE``), the changed value of a key whose default is not a number or a
switch (``CHANGED``), and the declarations.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR

TINY = [
    "space.C=4",
    "space.layers=1",
    "batch_size=8",
    "data.max_items=32",
    "epochs=2",
    "eval=false",
    "figures=false",
]

#: how each strategy runs at the tiny size: its space (the chain strategies need a chain) and a
#: selector that reads what it learns
BASE: dict[str, list[str]] = {
    "proxylessnas": ["space=proxyless_cifar", "search.update_every=1"],
    "fbnet": ["space=fbnet_cifar"],
    "rsws": [
        "selection=rsws",
        "selection.archs=4",
        "selection.top_k=1",
        "selection.batches_per_arch=1",
    ],
}
#: a component's settings that would refuse the tiny run outright (PC-DARTS's 15 warm-up epochs
#: cover both epochs)
COMPONENT_BASE: dict[str, list[str]] = {"pc_darts": ["components.pc_darts.warmup_epochs=1"]}
#: a component with no keys (weight_entangle: confopt's entangle_op_weights is a switch, and
#: listing the component is the switch) has no case here; that it acts or is refused on every
#: strategy is tests/search/test_components.py::test_every_pairing_acts_or_is_refused

#: the changed value of keys whose default is not a number or a switch (or whose generic change
#: would be meaningless), by key (the last part of its dotted name)
CHANGED: dict[str, Any] = {
    # strategies
    "arch_grad_clip": 1e-3,
    "arch_betas": [0.1, 0.9],
    "reg_type": "kl",
    "stages": [
        {"epochs": 1, "partial_channels": 1, "keep": 5},
        {"epochs": 1, "partial_channels": 1, "keep": 3},
    ],
    "eval_weights": "sample",
    "derive_weights": "mean",
    "unselected_scalars": False,  # GDAS's null is true on NB201
    "mode": "two",  # full computes what full_v2 does, with more memory
    "arch_optimizer": "adam",
    "schedule_epochs": 4,
    "resource_penalty": "log",
    "grad_clip": 1e-3,
    # components
    "t_max": 4,
    "t_stop": 1,
    "decay": "cosine",
    "anneal": "cosine",
    "max_skip_reduce": 1,  # refused on NB201's one cell type
    "operation": "conv1",
    "partial_channels": 2,
    "epochs": 4,
    "ramp_epochs": 2,
    # OLES: a window of one score (two summed) and a threshold above any such sum freeze every
    # op at the second step (with CONTEXT's other setting)
    "components.oles.frequency": 1,
    "components.oles.threshold": 2.5,
    "components.oles.val_grad": "separate",
    # costs
    "table": None,
    "target": 1.0,
    "form": "mul_log",
    "nonlinear": "absolute",
    "metric": ("params", "flops"),  # a tuple: the first that is not the default
    # top level
    "arch_batch": "random",
    "channels_last": False,
    "amp": "bf16",
    "stage_lr": "reference",
    "optimizer.warmup_epochs": 2,  # one epoch of (e + 1) / 1 is the full rate: no warm-up
    "warmup_lr": 0.05,  # without warm-up epochs: refused
    "device": "cpu",
}

#: extra overrides of a key's case and of its baseline, where the key acts only in a setting
#: the tiny run lacks (by the whole key, else its last part)
CONTEXT: dict[str, list[str]] = {
    # the weight step's clip joins another gradient's norm: visible once the clip bites
    "clip_mixing_with_weights": ["optimizer.grad_clip=1e-3"],
    "clip_arch_with_weights": ["optimizer.grad_clip=1e-3"],
    # DARTS-'s decays agree at two epochs (1 then 0.5, linear or cosine); they part at three
    "decay": ["epochs=3"],
    "t_stop": ["epochs=3"],
    # architecture dropout's linear and cosine agree at two epochs (p, then p / 2)
    "anneal": ["epochs=3"],
    # the hinge (nonlinear: positive) and |E / T - 1| part only below the target
    "nonlinear": ["cost.target=1e6"],
    # OLES decides at a window's end, after 20 scores by default: a tiny run's 4 steps see one
    # only with a one-score window; the paper's cos(g_val, g_train) (separate) is below the
    # accumulated cos(g_train + g_val, g_train), so a threshold between them freezes other ops
    "components.oles.frequency": ["components.oles.threshold=2.5"],
    "components.oles.threshold": ["components.oles.frequency=1"],
    "components.oles.val_grad": ["components.oles.frequency=1", "components.oles.threshold=1.0"],
}

#: (plug-in, key) -> why changing it changes nothing in a tiny run; the case is not run.
#: plug-in is a strategy, a component, a cost or "top"; "*" matches any strategy
NO_EFFECT: dict[tuple[str, str], str] = {
    ("top", "name"): "names the run folder",
    ("top", "resume"): "continues a run folder's checkpoint: tests/run/test_resume*.py",
    ("top", "from_run"): "selects on another run's supernet: tests/selection (from_run)",
    ("top", "device"): "this machine has only the CPU the tiny run already uses",
    ("top", "compile"): "torch.compile of the same forward (minutes cold on a CPU): "
    "tests/supernet/test_compile*.py",
    ("top", "log_every"): "how often step events are logged",
    ("top", "figures"): "draws the cells at the end",
    ("top", "sync_check_every"): "checks that the processes of a distributed run agree: one "
    "process here",
    ("top", "trackers"): "mirrors the logged values to an experiment tracker",
    ("top", "trust_pickle"): "reads a file that needs the full unpickler; a tiny run reads "
    "none (tests/run/test_no_pickle.py)",
    ("skip_stop", "components.skip_stop.max_skip_normal"): "the earliest stop is after the "
    "second epoch (e > min_epochs >= 0), which ends the 2-epoch run anyway: "
    "tests/search/test_skip_stop.py stops a 4-epoch search",
    ("skip_stop", "components.skip_stop.min_epochs"): "as max_skip_normal: no 2-epoch run can "
    "stop early (tests/search/test_skip_stop.py)",
    ("latency", "cost.force"): "accepts a latency table measured on another machine; the "
    "matrix's is measured here (a foreign one is refused without it: "
    "tests/hardware/test_table.py)",
}


@dataclass(frozen=True)
class Case:
    """One cell of the matrix: ``key`` of ``plugin`` changed to ``value`` on ``strategy``."""

    plugin: str
    key: str
    value: Any
    strategy: str
    base: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.strategy}-{self.plugin}-{self.key}"

    @property
    def override(self) -> str:
        return f"{self.key}={_hydra(self.value)}"

    @property
    def baseline(self) -> tuple[str, ...]:
        """The base overrides and the key's ``CONTEXT`` (a cost table made on first use)."""
        made = tuple(
            f"cost.table={table(o[len('cost.table=<table of ') : -1])}"
            if o.startswith("cost.table=<")
            else o
            for o in self.base
        )
        context = CONTEXT.get(self.key, CONTEXT.get(self.key.rsplit(".", 1)[-1], []))
        return (*made, *context)


def _hydra(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return str(value)


def _yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in tree.items():
        if k in ("_target_", "defaults", "hydra"):
            continue
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def changed(key: str, default: Any) -> Any:
    """The value a case sets: ``CHANGED`` by the whole key or its last part, else a switch flipped, an int
    plus one, a float halved (within (0, 1)) or doubled, 0.0 to 0.1."""
    last = key.rsplit(".", 1)[-1]
    if key in CHANGED or last in CHANGED:
        value = CHANGED[key] if key in CHANGED else CHANGED[last]
        return next(v for v in value if v != default) if isinstance(value, tuple) else value
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        if default == 0:
            return 0.1
        return default / 2 if 0 < default < 1 else default * 2
    raise KeyError(
        f"{key}: default {default!r}; declare its changed value in CHANGED "
        "(tests/settings_matrix.py)"
    )


def strategies() -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "search").glob("*.yaml"))


def base(strategy: str) -> list[str]:
    return [*TINY, f"search={strategy}", *BASE.get(strategy, [])]


def declared(plugin: str, key: str) -> str | None:
    head = key.split(".", 1)[0]
    return NO_EFFECT.get((plugin, key)) or NO_EFFECT.get((plugin, head))


def _value(plugin: str, key: str, default: Any) -> Any:
    """The case's value: changed from the tiny run's own value where ``TINY`` sets the key."""
    tiny = dict(o.split("=", 1) for o in TINY)
    if key in tiny:
        default = yaml.safe_load(tiny[key])
    return None if declared(plugin, key) else changed(key, default)


def strategy_cases() -> list[Case]:
    out = []
    for s in strategies():
        for key, default in _leaves(_yaml(CONFIG_DIR / "search" / f"{s}.yaml")):
            full = f"search.{key}"
            out.append(Case(s, full, _value(s, full, default), s, tuple(base(s))))
    return out


def component_cases() -> list[Case]:
    out = []
    for path in sorted((CONFIG_DIR / "components").glob("*.yaml")):
        c = path.stem
        for key, default in _leaves(_yaml(path)):  # "pc_darts.partial_channels"
            for s in strategies():
                b = (*base(s), f"components=[{c}]", *COMPONENT_BASE.get(c, []))
                full = f"components.{key}"
                out.append(Case(c, full, _value(c, full, default), s, b))
    return out


_TABLES: dict[str, str] = {}


def table(space: str) -> str:
    """A cost table of the tiny run's supernet (``nas-profile``, one timed call per part), made
    once per process."""
    if space not in _TABLES:
        from nas.cli.profile import main as profile

        out = Path(tempfile.mkdtemp(prefix="matrix-table-")) / f"{space}.json"
        args = ["--space", space, "--C", "4", "--layers", "1", "--warmup", "0", "--repeats", "1"]
        if profile([*args, "-q", "-o", str(out)]) != 0:
            raise RuntimeError(f"nas-profile could not write a table of {space}")
        _TABLES[space] = str(out)
    return _TABLES[space]


def space_of(strategy: str) -> str:
    given = [o.split("=", 1)[1] for o in BASE.get(strategy, []) if o.startswith("space=")]
    return given[0] if given else "nb201"


def cost_cases() -> list[Case]:
    out = []
    for path in sorted((CONFIG_DIR / "cost").glob("*.yaml")):
        c = path.stem
        for key, default in _leaves(_yaml(path)):
            for s in strategies():
                b = (
                    *base(s),
                    f"cost={c}",
                    f"cost.table=<table of {space_of(s)}>",
                    "cost.target=1e-3",
                )
                out.append(Case(c, f"cost.{key}", _value(c, f"cost.{key}", default), s, b))
    return out


TOP_GROUPS = {"space", "search", "selection", "data", "cost", "components", "experiment"}


def top_cases() -> list[Case]:
    tree = {k: v for k, v in _yaml(CONFIG_DIR / "nas_search.yaml").items() if k not in TOP_GROUPS}
    out = []
    for key, default in _leaves(tree):
        for s in strategies():
            out.append(Case("top", key, _value("top", key, default), s, tuple(base(s))))
    return out


# ------------------------------------------------------------------------------ running


@dataclass
class Outcome:
    refused: str | None  # the one-line refusal, or None when the run went through
    fingerprint: dict[str, Any] | None
    epochs_logged: int


def run(overrides: list[str]) -> Outcome:
    """A tiny search with ``overrides``: its refusal, or what it learned."""
    from nas.pipeline.search import SearchRun

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            cfg = compose(config_name="nas_search", overrides=overrides)
        except Exception as e:  # noqa: BLE001 - Hydra refuses an unknown key or a bad value
            return Outcome(f"{type(e).__name__}: {e}", None, 0)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            search = SearchRun(cfg, Path(tmp) / "run")
            result = search.run()
        except (ValueError, FileNotFoundError, ImportError) as e:
            return Outcome(str(e), None, epochs_logged(Path(tmp) / "run"))
        events = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").open()]
        fingerprint = {
            # what the run logs (an evaluation adds its values), not when or how fast
            "logged": sorted({f"{e['event']}.{k}" for e in events for k in e}),
            "genotype": str(result.genotype),
            "metrics": {
                k: v
                for k, v in result.final_metrics.items()
                if "per_s" not in k and "seconds" not in k and "memory" not in k
            },
            "strategy": {k: v.detach().clone() for k, v in search.strategy.state_dict().items()},
            "supernet": {k: v.detach().clone() for k, v in search.supernet.state_dict().items()},
        }
        return Outcome(None, fingerprint, 0)


def epochs_logged(run_dir: Path) -> int:
    """The epochs a run folder's ``metrics.jsonl`` reports as done."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return 0
    return sum(json.loads(line).get("event") == "epoch" for line in metrics.open())


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two fingerprints are equal to the last bit (tensors of another shape differ)."""
    if a["logged"] != b["logged"] or a["genotype"] != b["genotype"]:
        return False
    if set(a["metrics"]) != set(b["metrics"]):
        return False
    for k, v in a["metrics"].items():
        w = b["metrics"][k]
        if not (v == w or (isinstance(v, float) and math.isnan(v) and math.isnan(w))):
            return False
    for part in ("strategy", "supernet"):
        if set(a[part]) != set(b[part]):
            return False
        for k, t in a[part].items():
            u = b[part][k]
            if t.shape != u.shape or t.dtype != u.dtype or not torch.equal(t, u):
                return False
    return True


_BASELINES: dict[tuple[str, ...], Outcome] = {}


def check(case: Case) -> None:
    """The matrix's assertion for one case (see the module doc)."""
    import pytest

    if case.baseline not in _BASELINES:
        _BASELINES[case.baseline] = run(list(case.baseline))
    before = _BASELINES[case.baseline]
    if before.refused is not None:
        assert "\n" not in before.refused.strip(), before.refused
        pytest.skip(f"{case.strategy} refuses {case.plugin}: {before.refused}")
    after = run([*case.baseline, case.override])
    if after.refused is not None:
        assert "\n" not in after.refused.strip(), f"{case.override}: {after.refused}"
        assert after.epochs_logged == 0, f"{case.override} refused after an epoch: {after.refused}"
        return
    assert before.fingerprint is not None and after.fingerprint is not None
    assert not same(before.fingerprint, after.fingerprint), (
        f"{case.override} on search={case.strategy} is accepted and changes nothing: apply it, "
        "refuse it, or declare why in NO_EFFECT (tests/settings_matrix.py)"
    )


def cases(found: list[Case]) -> list[Any]:
    """``found`` less the declared keys, as pytest params named by their ids. Each key runs
    with its first strategy in the fast tier and with every other one in the full tier
    (marked ``slow``)."""
    import pytest

    seen: set[tuple[str, str]] = set()
    params = []
    for c in found:
        if declared(c.plugin, c.key):
            continue
        first = (c.plugin, c.key) not in seen
        seen.add((c.plugin, c.key))
        params.append(pytest.param(c, id=c.id, marks=() if first else pytest.mark.slow))
    return params
