"""Discrete DARTS-space networks compiled from a genotype: ``NetworkCIFAR``, ``NetworkImageNet``.

First stage of the pipeline (``search_spaces``): what ``nas.training`` retrains after a search.
Layer for layer the networks of quark0/darts ``cnn/model.py`` (Liu et al., ICLR 2019), with the
same constructor signatures, so reference code ports by changing an import:

* cells take s0 (cell k-2) and s1 (cell k-1), preprocess them (``FactorizedReduce`` for s0 after
  a reduction, else ReLU-Conv1x1-BN), and concatenate the genotype's output nodes;
* reduction cells sit at ``layers // 3`` and ``2 * layers // 3`` and double C;
* drop-path (Larsson et al., FractalNet) zeroes each op's output per sample while training,
  except identities. Unlike the reference it is not in place, which breaks autograd on modern
  PyTorch;
* the auxiliary head reads the output of cell ``2 * layers // 3``; the ImageNet head has no BN
  after its 768-channel conv (a typo in the reference that the published numbers depend on).

DARTS_V2 at C=36, 20 layers, 10 classes has 3,349,342 parameters without the auxiliary head.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from search_spaces import ops  # the concatenations, read at each call (see ``Cell.after_relu``)
from search_spaces.genotype import AnyGenotype, DartsGenotype
from search_spaces.ops import RELU_FIRST, FactorizedReduce, Identity, ReLUConvBN, build_op
from search_spaces.published import resolve_genotype

if TYPE_CHECKING:
    from search_spaces.layout import Part


def drop_path_scale(x: Tensor, drop_prob: float) -> Tensor:
    """Per-sample factors of drop-path on ``x``: 0 with probability ``drop_prob``, else 1/keep."""
    keep_prob = 1.0 - drop_prob
    mask = torch.empty(x.shape[0], 1, 1, 1, dtype=x.dtype, device=x.device).bernoulli_(keep_prob)
    return mask.div_(keep_prob)


def drop_path(x: Tensor, drop_prob: float) -> Tensor:
    """Zero whole samples with probability ``drop_prob`` and rescale the rest (not in place)."""
    if drop_prob <= 0.0:
        return x
    # One pass over x (x * (mask / keep)) instead of the reference's two (x / keep, then * mask).
    return x * drop_path_scale(x, drop_prob)


def as_darts_genotype(genotype: AnyGenotype | str) -> DartsGenotype:
    g = resolve_genotype(genotype)
    if not isinstance(g, DartsGenotype):
        raise ValueError(
            f"expected a DARTS-style genotype for a DARTS network, got the NB201 arch {g}"
        )
    return g


def _node_sum(terms: list[tuple[Tensor, Tensor | None]]) -> Tensor:
    """``sum(h * scale)`` over a node's two ops, ``scale`` None for no drop-path (one pass each)."""
    (a, sa), (b, sb) = terms
    if sa is None and sb is not None:
        (a, sa), (b, sb) = (b, sb), (a, sa)
    if sb is None:
        return a + b if sa is None else torch.addcmul(b, a, sa)
    return torch.addcmul(a * sa if sa is not None else a, b, sb)


class Cell(nn.Module):
    """One discrete cell: two ops per intermediate node, output = concat of chosen nodes.

    A sparse genotype's cell (FairDARTS ``model.py:60-113``, ``DCOCell``) has 0-2 ops per node:
    a node is the sum of its ops, drop-path applies to that sum (every node, identities
    included, as there), and the output concatenates the nodes that have inputs.
    """

    def __init__(
        self,
        genotype: DartsGenotype,
        C_prev_prev: int,
        C_prev: int,
        C: int,
        reduction: bool,
        reduction_prev: bool,
    ) -> None:
        super().__init__()
        if reduction_prev:
            self.preprocess0: FactorizedReduce | ReLUConvBN = FactorizedReduce(C_prev_prev, C)
        else:
            self.preprocess0 = ReLUConvBN(C_prev_prev, C, 1, 1, 0)
        self.preprocess1 = ReLUConvBN(C_prev, C, 1, 1, 0)
        cell_type = "reduce" if reduction else "normal"
        pairs = genotype.cell(cell_type)
        self.reduction = reduction
        self.sparse = genotype.sparse
        self._steps = len(pairs) // 2
        self._concat = list(genotype.output_nodes(cell_type))
        self.multiplier = len(self._concat)
        self._indices = [index for _, index in pairs]
        # sparse cells: (node, positions of its ops in _ops), nodes in order
        self._node_ops: list[tuple[int, list[int]]] = []
        for j, node in enumerate(genotype.nodes(cell_type)):
            if not self._node_ops or self._node_ops[-1][0] != node:
                self._node_ops.append((node, []))
            self._node_ops[-1][1].append(j)
        # Stride 2 on the edges that leave the two input nodes of a reduction cell.
        self._ops = nn.ModuleList(
            build_op(name, C, C, 2 if reduction and index < 2 else 1, affine=True)
            for name, index in pairs
        )

    def forward(self, s0: Tensor, s1: Tensor, drop_prob: float) -> Tensor:
        return self.after_relu(F.relu(s0), F.relu(s1), drop_prob)

    def after_relu(
        self, r0: Tensor, r1: Tensor, drop_prob: float, *, relu_output: bool = False
    ) -> Tensor:
        """The cell on its inputs already passed through ReLU (both preprocessings start so).

        The network computes each cell output's ReLU once for the two cells that read it, in the
        concatenation itself (``relu_output``: the output is only ever read through a ReLU,
        except the last cell's). Inside, each state's ReLU is computed once for all the ops
        that start with one (sep / dil convs, ``FactorizedReduce``), and drop-path's per-sample
        factors are applied in the node's sum: the reference's arithmetic in fewer passes.
        """
        states = [self.preprocess0.after_relu(r0), self.preprocess1.after_relu(r1)]
        relued: dict[int, Tensor] = {}
        dropping = self.training and drop_prob > 0.0
        if self.sparse:
            return self._sparse_nodes(states, relued, drop_prob if dropping else 0.0, relu_output)
        for i in range(self._steps):
            terms: list[tuple[Tensor, Tensor | None]] = []
            for j in (2 * i, 2 * i + 1):
                op = self._ops[j]
                h = self._run_op(j, states, relued)
                drop = dropping and not isinstance(op, Identity)
                terms.append((h, drop_path_scale(h, drop_prob) if drop else None))
            states.append(_node_sum(terms))
        nodes = [states[i] for i in self._concat]
        # looked up in ``ops`` at each call, so that an exporter's traceable stand-ins
        # (``nas.hardware.export.traceable_ops``) replace them here too
        return ops.concat_relu(nodes) if relu_output else ops.concat_channels(nodes)

    def _run_op(self, j: int, states: Mapping[int, Tensor] | list[Tensor], relued: dict) -> Tensor:
        """Op ``j`` on its input state; an op that starts with a ReLU reads the state's ReLU,
        computed once per state (``relued``) for all such ops."""
        op, index = self._ops[j], self._indices[j]
        if isinstance(op, RELU_FIRST):
            if index not in relued:
                relued[index] = F.relu(states[index])
            out: Tensor = op.after_relu(relued[index])
            return out
        result: Tensor = op(states[index])
        return result

    def _sparse_nodes(
        self, states: list[Tensor], relued: dict[int, Tensor], drop_prob: float, relu_output: bool
    ) -> Tensor:
        """The nodes of a sparse cell (``DCOCell.forward``): each the sum of its ops, then
        drop-path on the sum."""
        by_node: dict[int, Tensor] = {0: states[0], 1: states[1]}
        for node, positions in self._node_ops:
            out: Tensor | None = None
            for j in positions:
                h = self._run_op(j, by_node, relued)
                out = h if out is None else out + h
            assert out is not None
            by_node[node] = drop_path(out, drop_prob) if drop_prob > 0.0 else out
        nodes = [by_node[i] for i in self._concat]
        return ops.concat_relu(nodes) if relu_output else ops.concat_channels(nodes)


class _AuxiliaryHead(nn.Module):
    """``features`` (starting with a ReLU) then a linear classifier of the flattened result."""

    features: nn.Sequential
    classifier: nn.Linear

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x).flatten(1))

    def after_relu(self, x: Tensor) -> Tensor:
        """``forward`` of an input already passed through the head's first ReLU."""
        return self.classifier(self.features[1:](x).flatten(1))


class AuxiliaryHeadCIFAR(_AuxiliaryHead):
    """Auxiliary classifier on the 8x8 feature map of cell ``2 * layers // 3``."""

    def __init__(self, C: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.ReLU(inplace=True),
            nn.AvgPool2d(5, stride=3, padding=0, count_include_pad=False),  # 8x8 -> 2x2
            nn.Conv2d(C, 128, 1, bias=False),
            nn.BatchNorm2d(128),
            nn.ReLU(inplace=True),
            nn.Conv2d(128, 768, 2, bias=False),
            nn.BatchNorm2d(768),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(768, num_classes)


class AuxiliaryHeadImageNet(_AuxiliaryHead):
    """Auxiliary classifier on the 14x14 map; no BN after the 768-channel conv (as published)."""

    def __init__(self, C: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.ReLU(inplace=True),
            nn.AvgPool2d(5, stride=2, padding=0, count_include_pad=False),
            nn.Conv2d(C, 128, 1, bias=False),
            nn.BatchNorm2d(128),
            nn.ReLU(inplace=True),
            nn.Conv2d(128, 768, 2, bias=False),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(768, num_classes)


class _DartsNetwork(nn.Module):
    """The cell stack shared by the CIFAR and ImageNet networks."""

    drop_path_prob: float

    def _build_cells(
        self,
        genotype: DartsGenotype,
        C: int,
        C_stem: int,
        layers: int,
        reduction_prev: bool,
    ) -> int:
        if layers < 3:
            raise ValueError(f"layers must be at least 3 (two reduction cells), got {layers}")
        self._layers = layers
        self.drop_path_prob = 0.0
        self.cells = nn.ModuleList()
        C_prev_prev, C_prev, C_curr = C_stem, C_stem, C
        self.aux_channels = 0
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                C_curr *= 2
            cell = Cell(genotype, C_prev_prev, C_prev, C_curr, reduction, reduction_prev)
            reduction_prev = reduction
            self.cells.append(cell)
            C_prev_prev, C_prev = C_prev, cell.multiplier * C_curr
            if i == 2 * layers // 3:
                self.aux_channels = C_prev
        return C_prev

    def _run_cells(self, s0: Tensor, s1: Tensor) -> tuple[Tensor, Tensor | None]:
        # Every cell starts both inputs with a ReLU, and cell k's output is read by cells k+1 and
        # k+2 (and the auxiliary head, which starts with a ReLU too): one ReLU per output.
        r1 = F.relu(s1)
        r0 = r1 if s0 is s1 else F.relu(s0)
        logits_aux = None
        out = s1
        last = len(self.cells) - 1
        for i, cell in enumerate(self.cells):
            assert isinstance(cell, Cell)
            if i == last:
                out = cell.after_relu(r0, r1, self.drop_path_prob)
                break
            r0, r1 = r1, cell.after_relu(r0, r1, self.drop_path_prob, relu_output=True)
            if i == 2 * self._layers // 3 and self.auxiliary_head is not None and self.training:
                logits_aux = self.auxiliary_head.after_relu(r1)
        return out, logits_aux

    auxiliary_head: _AuxiliaryHead | None


class NetworkCIFAR(_DartsNetwork):
    """The DARTS CIFAR network; ``forward`` returns ``(logits, logits_aux or None)``.

    ``genotype`` may be a ``DartsGenotype``, its text, or a published name (``"DARTS_V2"``).
    Set ``drop_path_prob`` each epoch, as the reference training script does.
    """

    def __init__(
        self,
        C: int,
        num_classes: int,
        layers: int,
        auxiliary: bool,
        genotype: DartsGenotype | str,
    ) -> None:
        super().__init__()
        g = as_darts_genotype(genotype)
        self.genotype = g
        self._auxiliary = auxiliary
        C_stem = 3 * C  # stem multiplier 3
        self.stem = nn.Sequential(
            nn.Conv2d(3, C_stem, 3, padding=1, bias=False), nn.BatchNorm2d(C_stem)
        )
        C_prev = self._build_cells(g, C, C_stem, layers, reduction_prev=False)
        self.auxiliary_head = (
            AuxiliaryHeadCIFAR(self.aux_channels, num_classes) if auxiliary else None
        )
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C_prev, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        s = self.stem(x)
        out, logits_aux = self._run_cells(s, s)
        return self.classifier(self.global_pooling(out).flatten(1)), logits_aux


class NetworkImageNet(_DartsNetwork):
    """The DARTS ImageNet (mobile setting) network for 224x224 input.

    Two stride-2 stems bring 224 to 28; the first cell sees a "previous reduction" because
    its s0 (stem0, 56x56) is twice the size of its s1 (stem1, 28x28).
    """

    def __init__(
        self,
        C: int,
        num_classes: int,
        layers: int,
        auxiliary: bool,
        genotype: DartsGenotype | str,
    ) -> None:
        super().__init__()
        if C % 2:
            raise ValueError(
                f"NetworkImageNet needs an even C (its stem has C/2 channels), got {C}"
            )
        g = as_darts_genotype(genotype)
        self.genotype = g
        self._auxiliary = auxiliary
        self.stem0 = nn.Sequential(
            nn.Conv2d(3, C // 2, kernel_size=3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(C // 2),
            nn.ReLU(inplace=True),
            nn.Conv2d(C // 2, C, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(C),
        )
        self.stem1 = nn.Sequential(
            nn.ReLU(inplace=True),
            nn.Conv2d(C, C, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(C),
        )
        C_prev = self._build_cells(g, C, C, layers, reduction_prev=True)
        self.auxiliary_head = (
            AuxiliaryHeadImageNet(self.aux_channels, num_classes) if auxiliary else None
        )
        # The reference pools with AvgPool2d(7) on 224 input; adaptive pooling is identical
        # there and also accepts other input sizes.
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C_prev, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        s0 = self.stem0(x)
        s1 = self.stem1(s0)
        out, logits_aux = self._run_cells(s0, s1)
        return self.classifier(self.global_pooling(out).flatten(1)), logits_aux


# ------------------------------------------------------------- module by module (proxies)


def _module_cell_forward(cell: Cell, s0: Tensor, s1: Tensor) -> Tensor:
    """A discrete cell as the reference runs it: every op applies its own ReLU module."""
    states = [cell.preprocess0(s0), cell.preprocess1(s1)]
    for i in range(cell._steps):
        a, b = 2 * i, 2 * i + 1
        states.append(
            cell._ops[a](states[cell._indices[a]]) + cell._ops[b](states[cell._indices[b]])
        )
    return torch.cat([states[i] for i in cell._concat], dim=1)


def module_features(net: nn.Module, x: Tensor) -> Tensor:
    """The last cell's output of ``NetworkCIFAR`` / ``NetworkImageNet`` (the map the global
    pooling reads), every module called as the reference calls it, so that forward hooks see
    the modules the reference runs (``DartsFamily.features``: the zero-cost proxies)."""
    assert isinstance(net, (NetworkCIFAR, NetworkImageNet))
    if isinstance(net, NetworkImageNet):
        s0 = net.stem0(x)
        s1 = net.stem1(s0)
    else:
        s0 = s1 = net.stem(x)
    for cell in net.cells:
        assert isinstance(cell, Cell)
        s0, s1 = s1, _module_cell_forward(cell, s0, s1)
    return s1


def module_logits(net: nn.Module, x: Tensor) -> Tensor:
    """The logits of ``net`` from ``module_features`` (the auxiliary head left out)."""
    assert isinstance(net, (NetworkCIFAR, NetworkImageNet))
    logits: Tensor = net.classifier(net.global_pooling(module_features(net, x)).flatten(1))
    return logits


# ------------------------------------------------------------------- latency-table blocks


class _Concat(nn.Module):
    """``k`` feature maps of x's shape concatenated along channels (a cell's output)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x] * self.k, dim=1)


def layout_block(part: Part) -> nn.Module:
    """The module one of the family's fixed latency-table blocks (``DartsFamily.blocks``)
    measures at ``part``'s shape, as ``NetworkCIFAR`` builds it."""
    n, ci, co = part.name, part.C_in, part.C_out
    if n == "relu_conv1x1_bn":
        return ReLUConvBN(ci, co, 1, 1, 0)
    if n == "factorized_reduce":
        return FactorizedReduce(ci, co)
    if n == "concat":
        if co % ci:
            raise ValueError(f"concat part {part.key}: C_out must be a multiple of C_in")
        return _Concat(co // ci)
    if n == "head_darts":
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, co))
    raise ValueError(f"{n!r} is not a fixed block of the DARTS network")
