"""Weight entanglement: the ops of one kind at several kernel sizes share the largest's weights.

Second stage of the pipeline (``nas.supernet``). Sukthanker et al., "Weight-Entanglement Meets
Gradient-Based Neural Architecture Search" (AutoML-Conf 2024), as confopt implements it
(automl/ConfigurableOptimizer, ``src/confopt/oneshot/weightentangler.py``: ``WeightEntangler``,
called by ``searchspace/common/mixop.py``: ``OperationBlock.forward_method``). On one edge, a
group of candidates that differ only in the kernel size of some convolutions (the family says
which: ``Family.entangle_groups``) is computed as one op, the one with the largest kernel, whose
entangled convolutions run with the mixed kernel

    W_mix = sum_{k in group} w_k * pad(crop_k(W))

where ``crop_k(W)`` is the centre ``k x k`` of the largest kernel ``W`` and ``pad`` puts it back
in a ``K x K`` frame of zeros; the group's output joins the edge's sum with weight 1 (confopt's
``sum(non_we_outputs + we_outputs)``). One convolution chain per group instead of one per op
(the activation memory saved), and the smaller ops' own parameters are not needed: here they are
removed (their modules replaced by parameter-free placeholders), so the supernet is smaller by
their parameter counts. confopt keeps them as dead parameters that no forward reads.

``entangle_mixed_op`` checks that each smaller op has the largest's layers, shapes and settings
except the kernel of some convolutions, whose padding keeps the centre at the same place, so
the crop computes what the smaller op with those weights computes (``tests``). ``group_output``
is the forward of one group over its ops that run this forward (``MixedOp.running_ops``: a
masked, pruned or unsampled op takes no part in ``W_mix``); ``single_output`` is one member
alone (weight 1: a gate probe, ProxylessNAS's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor, nn
from torch.func import functional_call
from torch.nn import functional as F


@dataclass(frozen=True)
class EntangledGroup:
    """One group of an edge: op indices (largest kernel first), the entangled convolutions'
    weight names in the largest op, and each member's kernel size for each of them."""

    members: tuple[int, ...]
    weights: tuple[str, ...]
    kernels: dict[int, tuple[int, ...]]


def centre_kernel(weight: Tensor, k: int) -> Tensor:
    """The centre ``k x k`` of a square odd kernel ``weight``, zero-padded back to its size
    (confopt's ``_slice_kernel_weight``); ``weight`` itself for its own size."""
    K = weight.shape[-1]
    if k == K:
        return weight
    p = (K - k) // 2
    return F.pad(weight[..., p : p + k, p : p + k], (p, p, p, p))


def _same_but_kernel(large: nn.Module, small: nn.Module, where: str) -> dict[str, int]:
    """The weight names of the convolutions of ``large`` whose kernel ``small`` has smaller
    (-> the smaller size); a one-line ValueError unless ``small`` is ``large`` but for them."""
    big = dict(large.named_modules())
    little = dict(small.named_modules())
    if list(big) != list(little):
        raise ValueError(f"weight entanglement: {where} have different layers; expected one kind")
    out: dict[str, int] = {}
    for name, a in big.items():
        b = little[name]
        if type(a) is not type(b):
            raise ValueError(f"weight entanglement: {where} differ at {name!r}; expected one kind")
        if isinstance(a, nn.Conv2d) and isinstance(b, nn.Conv2d):
            ka, kb = a.kernel_size, b.kernel_size
            same = (a.in_channels, a.out_channels, a.stride, a.dilation, a.groups,
                    a.bias is None) == (b.in_channels, b.out_channels, b.stride, b.dilation,
                                        b.groups, b.bias is None)  # fmt: skip
            if not same or not isinstance(a.padding, tuple) or not isinstance(b.padding, tuple):
                raise ValueError(
                    f"weight entanglement: {where} differ at {name!r} beyond the kernel"
                )
            if ka == kb and a.padding == b.padding:
                continue
            K, k = ka[0], kb[0]
            shift = [(pa - pb) * 2 for pa, pb in zip(a.padding, b.padding)]
            if (ka[0] != ka[1] or kb[0] != kb[1] or K % 2 == 0 or k % 2 == 0 or k >= K
                    or shift != [d * (K - k) for d in a.dilation]):  # fmt: skip
                raise ValueError(
                    f"weight entanglement: {where} at {name!r} ({kb} in {ka}, padding "
                    f"{b.padding} in {a.padding}) is not a centre crop; expected odd square "
                    "kernels, the smaller centred in the larger"
                )
            out[f"{name}.weight" if name else "weight"] = k
        else:
            for pname, p in a.named_parameters(recurse=False):
                q = getattr(b, pname, None)
                if q is None or q.shape != p.shape:
                    raise ValueError(f"weight entanglement: {where} differ at {name!r}.{pname}")
    if not out:
        raise ValueError(f"weight entanglement: {where} have the same kernels; nothing to share")
    return out


class Placeholder(nn.Module):
    """Where an entangled smaller op was: no parameters, never run (its group runs instead)."""

    def __init__(self, name: str, kernel: tuple[int, ...]) -> None:
        super().__init__()
        self.name, self.kernel = name, kernel

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError(f"the entangled op {self.name} runs as part of its group")

    def extra_repr(self) -> str:
        return f"{self.name}, entangled (kernel {self.kernel})"


def entangle_mixed_op(mixed: nn.Module, groups: Sequence[tuple[int, ...]]) -> list[EntangledGroup]:
    """Entangle ``groups`` (op indices, largest kernel first) of ``mixed`` (a ``MixedOp``): the
    smaller ops' modules become placeholders; returns the groups' records."""
    ops: nn.ModuleList = mixed.ops  # type: ignore[assignment]
    names: Sequence[str] = mixed.op_names  # type: ignore[assignment]
    records = []
    for members in groups:
        large = ops[members[0]]
        crops: dict[int, dict[str, int]] = {}
        for m in members[1:]:
            crops[m] = _same_but_kernel(large, ops[m], f"{names[m]} and {names[members[0]]}")
        weights = tuple(sorted({w for c in crops.values() for w in c}))
        params = dict(large.named_parameters())
        kernels = {members[0]: tuple(int(params[w].shape[-1]) for w in weights)}
        for m in members[1:]:
            kernels[m] = tuple(crops[m].get(w, int(params[w].shape[-1])) for w in weights)
            ops[m] = Placeholder(names[m], kernels[m])
        records.append(EntangledGroup(tuple(members), weights, kernels))
    return records


def _run(large: nn.Module, group: EntangledGroup, x: Tensor, mixed_weights: list[Tensor]) -> Tensor:
    out: Tensor = functional_call(large, dict(zip(group.weights, mixed_weights)), (x,))
    return out


def group_output(
    ops: nn.ModuleList, group: EntangledGroup, x: Tensor, weights_O: Tensor, live: list[int]
) -> Tensor:
    """The largest op of ``group`` run with ``W_mix = sum_{k in live} w_k pad(crop_k(W))`` in
    each entangled convolution (``live``: the members that run this forward, not empty)."""
    large = ops[group.members[0]]
    mixed_weights = []
    for j, name in enumerate(group.weights):
        W = large.get_parameter(name)
        w = weights_O.to(W.dtype)
        terms = [centre_kernel(W, group.kernels[k][j]) * w[k] for k in group.members if k in live]
        mixed_weights.append(sum(terms[1:], terms[0]))
    return _run(large, group, x, mixed_weights)


def single_output(ops: nn.ModuleList, group: EntangledGroup, x: Tensor, k: int) -> Tensor:
    """Member ``k`` of ``group`` alone: the largest op with ``k``'s centre crops."""
    large = ops[group.members[0]]
    mixed_weights = [
        centre_kernel(large.get_parameter(name), group.kernels[k][j])
        for j, name in enumerate(group.weights)
    ]
    return _run(large, group, x, mixed_weights)


def entangle_supernet(
    supernet: nn.Module, groups_of: Callable[[Sequence[str]], list[tuple[int, ...]]]
) -> int:
    """Entangle every mixed op of ``supernet`` (its ``mixed_ops()``) whose candidates
    ``groups_of`` groups (``Family.entangle_groups``), where all of a group's ops are built (a
    chain's block beyond the depth has none); returns the number of groups entangled."""
    n = 0
    for mixed in supernet.mixed_ops():  # type: ignore[operator]
        if mixed.entangled:
            raise ValueError("weight entanglement: the supernet's ops are entangled already")
        groups = [g for g in groups_of(mixed.op_names) if all(mixed._runnable[k] for k in g)]
        if groups:
            mixed.set_entangled(entangle_mixed_op(mixed, groups))
            n += len(groups)
    return n
