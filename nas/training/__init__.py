"""nas.training: retrain a genotype from scratch (the stage after search and selection).

``run_train(cfg, run_dir)`` trains the network of ``cfg.genotype`` with the recipe in ``cfg``
(``configs/train``), on one process or under ``torchrun``; ``nas.distributed`` holds all
``torch.distributed`` code; ``resolve_train_genotype`` / ``build_network`` turn a genotype
reference into ``NetworkCIFAR``, ``NetworkImageNet`` or NB201's ``TinyNetwork``;
``run_eval(cfg)`` measures a training checkpoint on the test set (``nas.training.evaluate``).

Runs start from the Python API, ``nas.train(...)`` (``nas.api``), or ``nas-train``.
"""

from nas.training.ema import EMA
from nas.training.evaluate import run_eval
from nas.training.loop import TrainError, TrainResult, run_train
from nas.training.model import NetworkSpec, build_network, resolve_train_genotype

__all__ = [
    "EMA",
    "NetworkSpec",
    "TrainError",
    "TrainResult",
    "build_network",
    "resolve_train_genotype",
    "run_eval",
    "run_train",
]
