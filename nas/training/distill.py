"""Knowledge distillation: a fixed teacher's soft targets next to the labels, in every recipe.

Retraining stage (``nas.training``), an option of the training loop (``nas.training.loop``): with
``distill.teacher`` and ``distill.weight`` > 0 the training loss of a step is

    loss = CE(student, labels) + weight * KD,
    KD   = T^2 * mean over the batch of sum_k -softmax(t / T)_k * log_softmax(s / T)_k

(``s``, ``t``: the student's and the teacher's logits of the same augmented batch; ``T``:
``distill.temperature``; the CE part keeps the recipe's label smoothing and auxiliary head).

The two sources, and what is taken from each:

* once-for-all's retraining (mit-han-lab/once-for-all,
  ``ofa/imagenet_classification/run_manager/run_manager.py`` and
  ``distributed_run_manager.py``, ``train_one_epoch``): the teacher's logits of the student's
  own batch under ``no_grad``, the soft target ``softmax(t)``, the cross-entropy with a soft
  target of ``ofa/utils/pytorch_utils.py`` (``cross_entropy_loss_with_soft_target``: the mean
  over the batch of ``sum -p_t log p_s``) and the combination ``kd_ratio * KD + CE``
  (``train_ofa_net.py``: ``kd_ratio = 1.0``). The reference has no temperature (T = 1) and
  therefore no T^2 factor; it also runs its teacher in train mode (batch statistics in the
  teacher's batch norm). Here the teacher runs in eval mode (its running statistics: the
  network it was trained to be), as Hinton et al. describe a trained teacher.
* Hinton, Vinyals & Dean, "Distilling the Knowledge in a Neural Network" (2015), section 2:
  soft targets at temperature T, and the soft part's gradients scaled by T^2 so that its
  weight does not change with T. ``distill.scale_t2`` (default true) applies that factor; at
  T = 1 (once-for-all's setting) both choices are the reference's loss.

The KD value is a cross-entropy, not a KL divergence: the two differ by the teacher's entropy,
a constant of the batch, so their gradients are the same; the logged ``train_kd`` is the
cross-entropy, as once-for-all computes it.

The teacher (``distill.teacher``) is one of:

* a ``nas-train`` checkpoint or run folder (its ``checkpoints/last.pt``): the network is built
  from the checkpoint's own config and genotype, and its weights (not its EMA copy) loaded;
* a genotype reference (a published name such as ``DARTS_V2``, genotype text, an NB201 index):
  its trained weights are not available offline, so ``distill.weights`` must name them: a
  ``nas-train`` checkpoint or run folder that trained that genotype, or a ``state_dict`` file
  for the network at this run's model size (``model.<family>``);
* ``torchvision:<name>`` (``torchvision:resnet50``): ``distill.weights`` is a ``state_dict``
  file, or the name of one of the model's torchvision weights (``DEFAULT``,
  ``IMAGENET1K_V2``) whose file is already in torch's cache (``torch.hub.get_dir()``): nothing
  is downloaded at run time.

Every rank builds its own teacher on its own device (no DDP wrapper: it is never trained), in
eval mode with ``requires_grad`` off, in the run's memory format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from nas.data import dataset_info
from nas.run.checkpoint import CheckpointError, UnsafeFileError, load_checkpoint, safe_load
from nas.training.model import (
    NetworkSpec,
    logits_of,
    network_from_config,
    resolve_train_genotype,
)
from search_spaces.genotype import AnyGenotype, genotype_from_json

__all__ = ["TORCHVISION", "DistillError", "Teacher", "kd_loss", "load_teacher", "soft_target_loss"]

TORCHVISION = "torchvision:"  # the prefix of a torchvision teacher: torchvision:resnet50


class DistillError(ValueError):
    """A teacher that cannot be built or loaded: one line naming the setting."""


def soft_target_loss(
    student: Tensor, teacher: Tensor, *, temperature: float = 1.0, scale_t2: bool = True
) -> Tensor:
    """Hinton et al.'s soft-target loss: the batch mean of the cross-entropy between the
    teacher's and the student's class distributions at ``temperature``, times T^2 where
    ``scale_t2`` (section 2 of the paper); at T = 1 once-for-all's
    ``cross_entropy_loss_with_soft_target(student, softmax(teacher))``. Computed in the
    logits' own dtype; the caller passes float32 (or float64) logits."""
    target = F.softmax(teacher / temperature, dim=1)
    loss = -(target * F.log_softmax(student / temperature, dim=1)).sum(dim=1).mean()
    return loss * temperature**2 if scale_t2 else loss


@dataclass
class Teacher:
    """A fixed network whose logits are the soft targets: eval mode, no gradients."""

    net: nn.Module
    family: str | None  # the toolkit's network family (``logits_of``); None: plain logits
    description: str  # for the start line: what it is and where its weights came from

    @torch.no_grad()
    def logits(self, x: Tensor) -> Tensor:
        out = self.net(x)
        return out if self.family is None else logits_of(out, self.family)[0]


def _place(net: nn.Module, device: torch.device, channels_last: bool) -> nn.Module:
    net.to(device)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    net.eval()
    net.requires_grad_(False)
    return net


def _looks_like_path(text: str) -> bool:
    return Path(text).expanduser().exists() or "/" in text or text.endswith((".pt", ".pth"))


def _checkpoint_path(text: str, key: str) -> Path:
    """The checkpoint file of a ``nas-train`` run folder or checkpoint path named by ``key``."""
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "checkpoints" / "last.pt").is_file() and (path / "genotype.json").is_file():
            raise DistillError(
                f"{key}={text} is a nas-search run folder: it holds a genotype, not trained "
                "weights; give a nas-train run folder or checkpoint"
            )
        path = path / "checkpoints" / "last.pt"
    if not path.is_file():
        raise DistillError(f"{key}={text}: no nas-train checkpoint at {path}")
    return path


def _load_state_dict(net: nn.Module, weights: Any, what: str) -> None:
    try:
        net.load_state_dict(weights)
    except (RuntimeError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:2]) or (first[0] if first else "")
        raise DistillError(f"{what} do not fit the teacher network ({detail})") from None


def _from_checkpoint(
    path: Path,
    key: str,
    *,
    num_classes: int,
    image_size: int,
    data_name: str,
    trust_pickle: bool = False,
) -> tuple[nn.Module, NetworkSpec, AnyGenotype]:
    """The network of a nas-train checkpoint with its weights, its spec, its genotype."""
    try:
        state = load_checkpoint(path, kind="train", trust_pickle=trust_pickle)
    except CheckpointError as e:
        raise DistillError(f"{key}: {e}") from None
    old = OmegaConf.create(state["config"])
    try:
        trained_classes = int(dataset_info(str(old.data.name), old.data)["num_classes"])
    except (ValueError, FileNotFoundError):  # its image folder is not here: the weights decide
        trained_classes = num_classes
    if trained_classes != num_classes:
        raise DistillError(
            f"{key}: checkpoint {path} was trained on {old.data.name} ({trained_classes} "
            f"classes); data={data_name} has {num_classes}"
        )
    genotype = genotype_from_json(state["genotype"])
    try:
        net, spec = network_from_config(
            genotype, old.model, num_classes=num_classes, image_size=image_size
        )
    except ValueError as e:
        raise DistillError(f"{key}: {str(e).splitlines()[0]}") from None
    _load_state_dict(net, state["model"], f"the weights of checkpoint {path}")
    return net, spec, genotype


def _torchvision_teacher(name: str, weights: Any, *, num_classes: int) -> tuple[nn.Module, str]:
    """A torchvision classifier with weights from a file or from torch's cache; never fetched."""
    import torchvision

    spec = f"{TORCHVISION}{name}"
    if name not in torchvision.models.list_models():
        raise DistillError(
            f"distill.teacher={spec}: torchvision has no model {name!r} "
            "(torchvision.models.list_models() names them)"
        )
    if weights is None:
        raise DistillError(
            f"distill.teacher={spec} needs distill.weights: a state_dict file, or a torchvision "
            "weights name (DEFAULT, IMAGENET1K_V1, ...) whose file is in torch's cache; nothing "
            "is downloaded at run time"
        )
    text = str(weights)
    if _looks_like_path(text):
        path = Path(text).expanduser()
        if not path.is_file():
            raise DistillError(f"distill.weights={text}: no such file")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unreadable file is one line
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DistillError(
                f"distill.weights={text} is not a state_dict file ({reason})"
            ) from None
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
        _load_state_dict(net, state, f"the weights in {path}")
        return net, f"{spec} with the weights of {path}"
    enum = torchvision.models.get_model_weights(name)
    try:
        entry = enum[text] if text != "DEFAULT" else enum.DEFAULT
    except KeyError:
        names = ", ".join(["DEFAULT", *(w.name for w in enum)])
        raise DistillError(
            f"distill.weights={text}: {name} has no torchvision weights {text!r}; expected a "
            f"state_dict file or one of {names}"
        ) from None
    categories = len(entry.meta.get("categories") or [])
    if categories and categories != num_classes:
        raise DistillError(
            f"distill.weights={text}: {entry} classifies {categories} classes; the data has "
            f"{num_classes}"
        )
    cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(entry.url).name
    if not cached.is_file():
        raise DistillError(
            f"distill.weights={text}: {entry} is not in torch's cache ({cached}) and nothing is "
            "downloaded at run time; fetch it once where there is a network "
            f"(torchvision.models.get_model({name!r}, weights={str(entry)!r})) or give a file"
        )
    net = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    _load_state_dict(net, torch.load(cached, map_location="cpu", weights_only=True),
                     f"the weights in {cached}")  # fmt: skip
    return net, f"{spec} with {entry} ({cached})"


def load_teacher(
    distill: DictConfig,
    model: DictConfig,
    *,
    num_classes: int,
    image_size: int,
    data_name: str,
    device: torch.device,
    channels_last: bool,
    trust_pickle: bool = False,
) -> Teacher:
    """The teacher ``distill.teacher`` names (see the module docstring), on ``device`` in eval
    mode; ``DistillError`` (one line) when it cannot be built or its weights are missing.
    Files are read safely (``nas.run.checkpoint.safe_load``); ``trust_pickle`` reads one that
    needs the full unpickler."""
    spec = str(distill.teacher).strip()
    weights = distill.get("weights")
    if spec.startswith(TORCHVISION):
        net, description = _torchvision_teacher(
            spec[len(TORCHVISION) :], weights, num_classes=num_classes
        )
        return Teacher(_place(net, device, channels_last), None, description)
    if _looks_like_path(spec):
        if weights is not None:
            raise DistillError(
                f"distill.weights={weights} does not apply: the teacher {spec} is a nas-train "
                "checkpoint or run folder, which holds its weights"
            )
        path = _checkpoint_path(spec, "distill.teacher")
        net, spec_, _ = _from_checkpoint(
            path, "distill.teacher", num_classes=num_classes, image_size=image_size,
            data_name=data_name, trust_pickle=trust_pickle,
        )  # fmt: skip
        return Teacher(_place(net, device, channels_last), spec_.family, f"{spec_} from {path}")
    try:
        genotype = resolve_train_genotype(spec)
    except (ValueError, FileNotFoundError) as e:
        raise DistillError(f"distill.teacher={spec}: {str(e).splitlines()[0]}") from None
    if weights is None:
        raise DistillError(
            f"distill.teacher={spec} names a genotype, whose trained weights are not available "
            "offline; give distill.weights=<a nas-train checkpoint or run folder that trained "
            "it, or a state_dict file>"
        )
    text = str(weights)
    path = Path(text).expanduser()
    if path.is_dir() or (path.is_file() and _is_train_checkpoint(path, trust_pickle)):
        path = _checkpoint_path(text, "distill.weights")
        net, spec_, trained = _from_checkpoint(
            path, "distill.weights", num_classes=num_classes, image_size=image_size,
            data_name=data_name, trust_pickle=trust_pickle,
        )  # fmt: skip
        if str(trained) != str(genotype):
            raise DistillError(
                f"distill.weights={text} trained the genotype {trained}, not the teacher "
                f"{spec} ({genotype})"
            )
        return Teacher(
            _place(net, device, channels_last), spec_.family, f"{spec} ({spec_}) from {path}"
        )
    if not path.is_file():
        raise DistillError(f"distill.weights={text}: no such file or folder")
    try:
        net, net_spec = network_from_config(
            genotype, model, num_classes=num_classes, image_size=image_size
        )
    except ValueError as e:
        raise DistillError(f"distill.teacher={spec}: {str(e).splitlines()[0]}") from None
    try:
        state = safe_load(path, trust_pickle=trust_pickle, switch="trust_pickle=true")
    except UnsafeFileError as e:
        raise DistillError(f"distill.weights={text}: {e}") from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistillError(f"distill.weights={text} is not a state_dict file ({reason})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    _load_state_dict(net, state, f"the weights in {path} ({net_spec}, this run's model size)")
    return Teacher(
        _place(net, device, channels_last), net_spec.family, f"{spec} ({net_spec}) from {path}"
    )


def _is_train_checkpoint(path: Path, trust_pickle: bool = False) -> bool:
    """Whether ``path`` is a nas-train checkpoint (a dict of kind "train"), not a state_dict."""
    try:
        state = safe_load(path, trust_pickle=trust_pickle, switch="trust_pickle=true")
    except Exception:  # noqa: BLE001 - not loadable: the state_dict branch says why
        return False
    return isinstance(state, dict) and state.get("kind") == "train"


def kd_loss(
    logits: Tensor, teacher_logits: Tensor, *, temperature: float, scale_t2: bool
) -> Tensor:
    """The KD part of a training step, in float32 (autocast may leave logits in bf16 / fp16)."""
    return soft_target_loss(
        logits.float(), teacher_logits.float(), temperature=temperature, scale_t2=scale_t2
    )
