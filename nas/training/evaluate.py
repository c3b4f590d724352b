"""Evaluation only: the test accuracy of a training checkpoint (``nas-train eval_only=true``).

Retraining stage (``nas.training``), after the training loop (``nas.training.loop``). Reads a
``nas-train`` checkpoint (a file, or a run folder's ``checkpoints/last.pt``) and the test set of
``cfg.data``; builds the network, and its EMA copy where the checkpoint holds one, from the
checkpoint's own config, and measures them with the loop's own set-up: the same test set,
per-process batch, loader, network building and placement and evaluation pass
(``eval_dataset``, ``eval_batch_size``, ``eval_data_loader``, ``build_train_network``,
``place_network``, ``evaluate_network``), so that a checkpoint gives the numbers its run
logged. Writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nas import distributed as D
from nas.data import dataset_info
from nas.run.checkpoint import load_checkpoint
from nas.run.skeleton import autocast_dtype
from nas.training.loop import (
    TrainError,
    TrainRun,
    build_train_network,
    eval_batch_size,
    eval_data_loader,
    eval_dataset,
    evaluate_network,
    place_network,
)
from search_spaces.genotype import genotype_from_json


def checkpoint_file(spec: Any) -> Path:
    """A training checkpoint from a file path or a run folder (its ``checkpoints/last.pt``)."""
    if spec is None or str(spec).strip() == "":
        raise TrainError(
            "eval_only=true needs checkpoint=<a nas-train checkpoint or run folder>; got null"
        )
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    return path


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate the weights (and EMA weights) of a training checkpoint on the test set of
    ``cfg.data``; the network is built from the checkpoint's own config. Writes nothing."""
    env = D.env_from_torchrun()
    path = checkpoint_file(cfg.get("checkpoint"))
    # the device and precision as a training run resolves them (nas.run.skeleton.Run)
    try:
        device = D.select_device(str(cfg.device), env)
        amp_dtype = autocast_dtype(cfg.get("amp"), device)
    except ValueError as e:
        raise TrainError(str(e)) from None
    batch = eval_batch_size(cfg, env.world_size)
    name = str(cfg.data.name)
    try:
        info = dataset_info(name, cfg.data)
        test_set = eval_dataset(cfg)
    except (ValueError, FileNotFoundError) as e:
        raise TrainError(str(e)) from None
    D.init_distributed(env, device)
    state = D.main_then_broadcast(
        lambda: load_checkpoint(
            path, kind=TrainRun.kind, trust_pickle=bool(cfg.get("trust_pickle", False))
        ),
        TrainRun.broadcast_errors,
        TrainError,
    )
    old = OmegaConf.create(state["config"])
    trained_on = str(old.data.name)
    try:
        trained_classes = int(dataset_info(trained_on, old.data)["num_classes"])
    except (ValueError, FileNotFoundError):  # its image folder is not here: trust the weights
        trained_classes = int(info["num_classes"])
    if trained_classes != int(info["num_classes"]):
        raise TrainError(
            f"checkpoint {path} was trained on {trained_on} ({trained_classes} classes); "
            f"data={name} has {info['num_classes']}"
        )
    genotype = genotype_from_json(state["genotype"])
    num_classes, image_size = int(info["num_classes"]), int(info["image_size"])
    channels_last = bool(cfg.channels_last)
    loader = eval_data_loader(test_set, cfg, batch_size=batch, env=env)

    def evaluate(weights: dict[str, Any], prefix: str) -> tuple[str, dict[str, float]]:
        """(the network's name, its metrics) with ``weights`` loaded."""
        net, spec = build_train_network(
            genotype, old.model, num_classes=num_classes, image_size=image_size
        )
        net.load_state_dict(weights)
        net = place_network(net, device, channels_last=channels_last)
        metrics = evaluate_network(
            net,
            loader,
            family=spec.family,
            device=device,
            amp_dtype=amp_dtype,
            channels_last=channels_last,
            prefix=prefix,
        )
        return str(spec), metrics

    network, metrics = evaluate(state["model"], "test")
    results: dict[str, Any] = {
        "checkpoint": str(path.absolute()),
        "network": network,
        "genotype": str(genotype),
        "epoch": int(state["epoch"]),
        "data": name,
        "test_images": len(test_set),  # type: ignore[arg-type]
        **metrics,
    }
    if state.get("ema") is not None:
        results.update(evaluate(state["ema"]["module"], "ema_test")[1])
    return results
