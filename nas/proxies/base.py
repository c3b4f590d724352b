"""Zero-cost proxies: the registry, the scored network and what every proxy shares.

Part of the selection stage (``nas.proxies``): training-free scores of an untrained network,
used as NAS baselines (``nas-proxy``) and as the criterion of zero-cost operation scoring
(``nas.selection.zero_cost``). The harness follows the references exactly (see each proxy's
module and docs/proxies.md):

* Abdelfattah et al., "Zero-Cost Proxies for Lightweight NAS", ICLR 2021
  (SamsungLabs/zero-cost-nas, ``foresight/pruners``): grad_norm, snip, grasp, fisher,
  jacob_cov, synflow. Only ``Conv2d`` / ``Linear`` *weights* are scored (``p_utils.py:
  get_layer_metric_array``); the net score is the sum over layers and elements; BN runs in
  batch-statistics mode (the reference never calls ``eval()``) or is removed (``bn=False``).
* Mellor et al., "Neural Architecture Search without Training", ICML 2021 (naswot);
  Lin et al., "Zen-NAS", ICCV 2021 (zen); parameter and FLOP counts as baselines.

A proxy scores a ``Scorable``: a discrete network of our spaces (``TinyNetwork``,
``NetworkCIFAR`` / ``NetworkImageNet``), a supernet with given architecture weights
(``Scorable(supernet, weights)``), or any module that maps images to logits. ``Scorable``
gets the logits and the pre-global-pooling feature map of each from its space family
(``Family.reference_logits``, ``Family.features``) or supernet (``Supernet.features``), and runs
them with every conv as a module call (``FactorizedReduce``'s fast path convolves with
functions, which hooks would miss), so the hooks of fisher, naswot and flops see the layers the
reference sees.
Proxies never leave gradients, BN statistics or changed weights behind on the network they
score (gradients come from ``torch.autograd.grad``; proxies that rewrite weights work on a copy).
"""

from __future__ import annotations

import abc
import copy
import math
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from nas.registry import Registry
from nas.supernet import Supernet
from nas.supernet.mixed_op import MixedOp
from search_spaces.families import family_of_network
from search_spaces.ops import FactorizedReduce


class ProxyError(ValueError):
    """A network or batch that a proxy cannot score (a one-line message)."""


@dataclass(frozen=True)
class DataSpec:
    """What a proxy's reference feeds it.

    ``kind``: ``"data"`` (training images with labels), ``"ones"`` (an all-ones input of one
    image, synflow) or ``"gaussian"`` (N(0, 1) inputs, zen). ``augment``: the reference's
    training transform (random crop and flip) rather than the plain normalised images.
    """

    kind: str = "data"
    batch_size: int = 64
    augment: bool = True


class Proxy(abc.ABC):
    """A zero-cost proxy: ``score(net, x, y)`` -> float, larger = predicted better.

    ``shared_pass``: proxies with the same value can be computed from one forward and backward
    (``nas.proxies.gradients.GradientPass``); the harness then runs that pass once for all of
    them (``score_many``).
    """

    name: ClassVar[str]
    data: ClassVar[DataSpec] = DataSpec()
    shared_pass: ClassVar[str | None] = None
    #: how Zero-Cost-PT (``selection=zc``) scores the removal of an op from an edge: "uniform"
    #: sets the edge's weights to 1/|ops| and then removes the op (its ``pt_project`` for the
    #: proxies in general), "remove" only zeroes the op's weight
    removal: ClassVar[str] = "uniform"

    @classmethod
    def selection_options(cls, *, supernet: bool) -> dict[str, Any]:
        """Default options of the proxy in Zero-Cost-PT, when it scores mixing-weight
        variants of a supernet (``supernet``) or the networks of post-validation; the
        selection's own ``proxy_options`` win."""
        del supernet
        return {}

    @abc.abstractmethod
    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        """The score of ``net`` on input ``x`` (labels ``y`` where the proxy uses them)."""

    def __repr__(self) -> str:
        return f"<proxy {self.name}>"


PROXIES: Registry[type[Proxy]] = Registry("proxy")


def proxy_class(name: str) -> type[Proxy]:
    """The proxy class registered as ``name`` (a one-line ``ProxyError`` for unknown names).

    Every proxy is registered by then: importing any module of ``nas.proxies`` runs the
    package's ``__init__`` first, which imports each proxy's module."""
    try:
        return PROXIES.get(name)
    except ValueError as e:
        raise ProxyError(str(e)) from None


def get_proxy(name: str, **options: Any) -> Proxy:
    """An instance of the proxy registered as ``name`` with keyword ``options`` (a one-line
    error for unknown names and options)."""
    cls = proxy_class(name)
    try:
        return cls(**options)
    except TypeError:
        raise ProxyError(f"proxy {name!r} takes no options {sorted(options)}") from None


# ----------------------------------------------------------------------- the scored network


def _reference_factorized_reduce(self: FactorizedReduce, x: Tensor) -> Tensor:
    """quark0/darts ``FactorizedReduce.forward``: ReLU module, two stride-2 conv modules."""
    x = self.relu(x)
    return self.bn(torch.cat([self.conv_1(x), self.conv_2(x[:, :, 1:, 1:])], dim=1))


@contextmanager
def module_calls(module: nn.Module) -> Iterator[None]:
    """Every ``FactorizedReduce`` in ``module`` runs the reference's module-by-module forward
    (same arithmetic as its fast path; hooks on its ReLU and convs fire as in the reference),
    every supernet edge lets each op apply its own ReLU module and pool
    (``MixedOp.share_relu``, ``share_pools``), and
    a supernet skips its ops of weight zero (``Supernet.zero_weight_ops_run`` off, whatever
    the search set: the proxies count, hook and measure the ops that a weight selects; naswot
    adds the reference's zero-input term for the skipped ones)."""
    # reentrant: a nested call (naswot measuring one op inside a scored network) leaves the
    # modules an outer call patched to that call
    patched = [
        m
        for m in module.modules()
        if isinstance(m, FactorizedReduce) and "forward" not in m.__dict__
    ]
    # supernet edges: each op applies its own ReLU module (not one ReLU per state)
    sharing = [m for m in module.modules() if isinstance(m, MixedOp) and m.share_relu]
    pooling = [m for m in module.modules() if isinstance(m, MixedOp) and m.share_pools]
    running = [m for m in module.modules() if isinstance(m, Supernet) and m.zero_weight_ops_run]
    for m in patched:
        m.forward = types.MethodType(_reference_factorized_reduce, m)  # type: ignore[method-assign]
    for mixed in sharing:
        mixed.share_relu = False
    for mixed in pooling:
        mixed.share_pools = False
    for net in running:
        net.zero_weight_ops_run = False
    try:
        yield
    finally:
        for m in patched:
            del m.forward
        for mixed in sharing:
            mixed.share_relu = True
        for mixed in pooling:
            mixed.share_pools = True
        for net in running:
            net.zero_weight_ops_run = True


class Scorable:
    """A network to score: logits and the pre-global-pooling map of any network of our spaces.

    ``Scorable(net)`` for a discrete network or a plain module (images -> logits);
    ``Scorable(supernet, weights)`` for a supernet at architecture weights ``weights``
    (cell type -> [edges, ops]), the weights held fixed (they are not scored).
    """

    def __init__(self, net: nn.Module, weights: dict[str, Tensor] | None = None) -> None:
        if isinstance(net, Scorable):
            raise ProxyError("expected a network, got a Scorable; pass Scorable.net")
        if not isinstance(net, nn.Module):
            raise ProxyError(f"expected a torch.nn.Module to score, got {type(net).__name__}")
        self.is_supernet = isinstance(net, Supernet)
        if self.is_supernet and weights is None:
            raise ProxyError(
                "a supernet is scored at given architecture weights: Scorable(supernet, weights)"
            )
        if not self.is_supernet and weights is not None:
            raise ProxyError(
                f"architecture weights only go with a supernet, not a {type(net).__name__}"
            )
        if weights is not None:
            assert isinstance(net, Supernet)
            shapes = net.arch_shapes()
            if set(weights) != set(shapes):
                raise ProxyError(
                    f"architecture weights for cell types {sorted(weights)}; the supernet "
                    f"has {sorted(shapes)}"
                )
            for ct, w in weights.items():
                if tuple(w.shape) != shapes[ct]:
                    raise ProxyError(
                        f"architecture weights for {ct!r} have shape {tuple(w.shape)}; "
                        f"expected {shapes[ct]}"
                    )
        self.net = net
        self.weights = None if weights is None else {k: v.detach() for k, v in weights.items()}
        self.kind = type(net).__name__

    # ------------------------------------------------------------------------- forwards

    def _weights_like(self, x: Tensor) -> dict[str, Tensor]:
        assert self.weights is not None
        return {k: v.to(device=x.device, dtype=x.dtype) for k, v in self.weights.items()}

    def logits(self, x: Tensor) -> Tensor:
        """The network's logits [N, classes] for images ``x``."""
        net = self.net
        with module_calls(net):
            family = None if self.is_supernet else family_of_network(net)
            if self.is_supernet:
                out = net(x, self._weights_like(x))
            elif family is not None:  # a discrete network of a space family
                out = family.reference_logits(net, x)
            else:
                out = net(x)
        if not isinstance(out, Tensor):
            raise ProxyError(
                f"{self.kind} returned {type(out).__name__}; the proxies need a network whose "
                "forward returns logits (or a TinyNetwork / NetworkCIFAR / supernet)"
            )
        return out

    def has_features(self) -> bool:
        """Whether the network has a pre-pooling map: a discrete network of a space family, or
        a supernet that implements ``Supernet.features``."""
        if isinstance(self.net, Supernet):
            return type(self.net).features is not Supernet.features
        return family_of_network(self.net) is not None

    def features(self, x: Tensor) -> Tensor:
        """The feature map before global average pooling (Zen-NAS's ``forward_pre_GAP``)."""
        net = self.net
        if self.has_features():
            with module_calls(net):
                if isinstance(net, Supernet):
                    return net.features(x, self._weights_like(x))
                family = family_of_network(net)
                assert family is not None
                return family.features(net, x)
        raise ProxyError(
            f"no pre-pooling feature map for a {self.kind}: zen scores a TinyNetwork, "
            "NetworkCIFAR / NetworkImageNet or a supernet"
        )

    # ------------------------------------------------------------------------- layers

    def scored_layers(self, proxy: str) -> list[nn.Conv2d | nn.Linear]:
        """The Conv2d / Linear modules whose weights the ZC proxies score, in module order."""
        layers = [m for m in self.net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        if not layers:
            raise ProxyError(f"{proxy} scores Conv2d / Linear weights, and a {self.kind} has none")
        return layers

    def num_classes_check(self, proxy: str, logits: Tensor, y: Tensor) -> None:
        if logits.dim() != 2:
            raise ProxyError(
                f"{proxy} needs logits [N, classes]; {self.kind} returned shape "
                f"{tuple(logits.shape)}"
            )
        if y.numel() and int(y.max()) >= logits.shape[1]:
            raise ProxyError(
                f"{proxy}: labels reach {int(y.max())} but {self.kind} has {logits.shape[1]} "
                "outputs"
            )

    def copy(self) -> Scorable:
        """A deep copy (for proxies that rewrite weights)."""
        return Scorable(
            copy.deepcopy(self.net), None if self.weights is None else dict(self.weights)
        )

    @property
    def device(self) -> torch.device:
        p = next(self.net.parameters(), None)
        return p.device if p is not None else torch.device("cpu")


def as_scorable(net: nn.Module | Scorable, weights: dict[str, Tensor] | None = None) -> Scorable:
    return net if isinstance(net, Scorable) else Scorable(net, weights)


# --------------------------------------------------------------------------- BN handling

_BN = nn.modules.batchnorm._BatchNorm


def _identity(self: nn.Module, x: Tensor) -> Tensor:
    return x


def _untrained_stats(self: _BN, x: Tensor) -> Tensor:
    # The running statistics of an untrained BN (mean 0, variance 1), as ZPT's eval()-mode
    # supernet sees them; our supernet cells keep no running statistics to read them from.
    shape = [1, -1] + [1] * (x.dim() - 2)
    y = x / math.sqrt(1.0 + self.eps)
    if self.weight is not None:
        y = y * self.weight.view(shape)
    if self.bias is not None:
        y = y + self.bias.view(shape)
    return y


@contextmanager
def bn_mode(net: nn.Module, mode: str) -> Iterator[None]:
    """Run ``net`` with its BN layers in ``mode``, restoring mode and statistics afterwards.

    ``train``: batch statistics (the ZC harness: no ``eval()`` call); ``none``: BN is the
    identity (ZC's ``bn=False``: synflow); ``eval``: running statistics, and for BN layers that
    keep none, the statistics of an untrained BN (ZPT scores its supernet in ``eval()``).
    """
    if mode not in ("train", "none", "eval"):
        raise ProxyError(f"BN mode must be train, none or eval, got {mode!r}")
    bns = [m for m in net.modules() if isinstance(m, _BN)]
    saved = [{k: v.clone() for k, v in m.named_buffers(recurse=False)} for m in bns]
    was_training = net.training
    net.train(mode != "eval")
    for m in bns:
        if mode == "none":
            m.forward = types.MethodType(_identity, m)  # type: ignore[method-assign]
        elif mode == "eval" and not m.track_running_stats:
            m.forward = types.MethodType(_untrained_stats, m)  # type: ignore[method-assign]
    try:
        yield
    finally:
        net.train(was_training)
        for m, buffers in zip(bns, saved):
            if "forward" in m.__dict__:
                del m.forward
            for k, v in buffers.items():
                getattr(m, k).copy_(v)


# ------------------------------------------------------------------------------- checks


def check_images(proxy: str, x: Tensor, *, min_batch: int = 1) -> None:
    """One-line refusal of an input that is not a float batch of at least ``min_batch``."""
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise ProxyError(f"{proxy} needs a float tensor input, got {getattr(x, 'dtype', type(x))}")
    if x.dim() < 2 or x.shape[0] < min_batch:
        raise ProxyError(
            f"{proxy} needs a batch of at least {min_batch} inputs, got shape {tuple(x.shape)}"
        )


def check_labels(proxy: str, x: Tensor, y: Tensor | None) -> Tensor:
    if y is None:
        raise ProxyError(f"{proxy} needs labels (its loss is cross-entropy); got none")
    if y.dtype != torch.long or y.shape != (x.shape[0],):
        raise ProxyError(
            f"{proxy} needs int64 labels of shape ({x.shape[0]},), got {y.dtype} {tuple(y.shape)}"
        )
    return y


def cross_entropy(logits: Tensor, y: Tensor) -> Tensor:
    return F.cross_entropy(logits, y)


def finite_or_nan(value: float) -> float:
    return value if math.isfinite(value) else float("nan")


ScoreFn = Callable[[Scorable, Tensor, Tensor | None], float]

__all__ = [
    "PROXIES",
    "DataSpec",
    "Proxy",
    "ProxyError",
    "Scorable",
    "as_scorable",
    "bn_mode",
    "check_images",
    "check_labels",
    "get_proxy",
    "module_calls",
]
