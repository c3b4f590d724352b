"""From a genotype reference to the network that retrains it.

Retraining stage (``nas.training``), the hand-off from search: ``resolve_train_genotype`` accepts
everything a user has at hand after a search or from a paper, and ``build_network`` asks the
genotype's space family (``search_spaces.families``) for the network the genotype and the data
call for:

* a DARTS-space genotype -> ``NetworkCIFAR`` (DARTS, Liu et al., ICLR 2019) for 32x32 data, or
  ``NetworkImageNet`` (the mobile setting) for ImageNet;
* an NB201 cell -> NAS-Bench-201's ``TinyNetwork`` (Dong & Yang, ICLR 2020), which has neither
  an auxiliary head nor drop-path.

Only ``search_spaces`` is needed: a published genotype retrains without any search code.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from search_spaces.families import FAMILY_OF_NETWORK, NetworkSpec, family_of, indexed_family
from search_spaces.genotype import AnyGenotype, genotype_from_json
from search_spaces.published import resolve_genotype

__all__ = [
    "GENOTYPE_FORMS",
    "NetworkSpec",
    "build_network",
    "logits_of",
    "resolve_train_genotype",
    "unused_parameters",
]

GENOTYPE_FORMS = (
    "a genotype.json file, a nas-search run folder, a published name (e.g. DARTS_V2), "
    "genotype text, an NB201 arch string or an NB201 index"
)


def _from_record(record: Any, where: str) -> AnyGenotype:
    """The genotype of a ``genotype.json`` written by nas-search, or of a bare genotype JSON."""
    if isinstance(record, dict) and isinstance(record.get("genotype"), dict):
        record = record["genotype"]
    try:
        return genotype_from_json(record)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def resolve_train_genotype(spec: Any) -> AnyGenotype:
    """The genotype ``spec`` names: a path to a ``genotype.json`` (a nas-search run writes one),
    a run folder holding one, a published name, genotype text, an NB201 arch string, or an
    NB201 benchmark index (int or digits)."""
    if isinstance(spec, bool) or spec is None:
        raise ValueError(f"genotype is required: expected {GENOTYPE_FORMS}; got {spec!r}")
    if isinstance(spec, int):
        spec = str(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"genotype must be {GENOTYPE_FORMS}; got {spec!r}")
    text = spec.strip()
    if text.isdigit():  # a published network by number (NB201: the benchmark's index)
        index = int(text)
        family = indexed_family()
        if not 0 <= index < family.num_indexed:
            raise ValueError(
                f"{family.title} index {index} is out of range; expected "
                f"0..{family.num_indexed - 1}"
            )
        return family.indexed_genotype(index)
    looks_like_text = text.startswith(("|", "{")) or "(" in text
    path = Path(text).expanduser()
    if not looks_like_text and (path.exists() or "/" in text or text.endswith(".json")):
        if path.is_dir():
            record_path = path / "genotype.json"
            if not record_path.is_file():
                raise FileNotFoundError(
                    f"genotype folder {path.absolute()} has no genotype.json; expected the run "
                    "folder of a finished nas-search"
                )
            path = record_path
        if not path.is_file():
            raise FileNotFoundError(
                f"no genotype file at {path.absolute()}; expected {GENOTYPE_FORMS}"
            )
        try:
            record = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"genotype file {path.absolute()} is not JSON ({e})") from None
        return _from_record(record, f"genotype file {path.absolute()}")
    return resolve_genotype(text)


def build_network(
    genotype: AnyGenotype,
    *,
    num_classes: int,
    image_size: int,
    C: int,
    layers: int,
    auxiliary: bool,
) -> tuple[nn.Module, NetworkSpec]:
    """The discrete network of ``genotype`` for data of ``image_size`` and ``num_classes``, at
    ``C`` channels and ``layers`` cells (the family's size word: DARTS cells, NB201 cells per
    stage N).

    ImageNet-sized data (``image_size > 64``) gets ``NetworkImageNet``; an NB201 cell
    ``TinyNetwork`` (which has no auxiliary head: ``auxiliary`` is ignored there).
    """
    return family_of(genotype).network(
        genotype,
        C=C,
        layers=layers,
        num_classes=num_classes,
        image_size=image_size,
        auxiliary=auxiliary,
    )


def network_from_config(
    genotype: AnyGenotype, model: Any, *, num_classes: int, image_size: int
) -> tuple[nn.Module, NetworkSpec]:
    """The discrete network of ``genotype`` at the size of its family's section of a ``model``
    config (``configs/train``: ``model.<family>.C`` and ``model.<family>.<layers word>``, i.e.
    ``darts.layers`` / ``nb201.N``; ``auxiliary``): the one place that reads them, for a new
    run, a resumed one and an evaluation of a checkpoint. A new family adds its section to the
    config, not a branch here."""
    family = family_of(genotype)
    section = model.get(family.name) if hasattr(model, "get") else None
    width, cells = family.size_keys
    if section is None or width not in section or cells not in section:
        raise ValueError(
            f"the model config has no size for {family.name} networks; expected "
            f"model.{family.name}.{width} and model.{family.name}.{cells}"
        )
    return family.network(
        genotype,
        C=int(section[width]),
        layers=int(section[cells]),
        num_classes=num_classes,
        image_size=image_size,
        auxiliary=bool(model.auxiliary),
    )


def logits_of(output: Any, family: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logits, auxiliary logits or None)`` of a forward pass of any family."""
    return FAMILY_OF_NETWORK[family].logits(output)


def unused_parameters(net: nn.Module, spec: NetworkSpec, device: torch.device) -> list[str]:
    """Names of the parameters that get no gradient in a training step (e.g. ops of an NB201
    cell cut off from its output), found on a copy; DDP must be told of them."""
    probe = copy.deepcopy(net).to(device).train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        x = torch.randn(2, *spec.input_size, device=device)
        logits, logits_aux = logits_of(probe(x), spec.family)
        loss = logits.sum() + (logits_aux.sum() if logits_aux is not None else 0.0)
        loss.backward()
    return [n for n, p in probe.named_parameters() if p.requires_grad and p.grad is None]
