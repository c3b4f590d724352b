"""GDAS's DARTS-space search network: ``space.lastact`` and ``space.pool_bn``.

D-X-Y/AutoDL-Projects ``xautodl/models/cell_searchs/search_model_gdas_nasnet.py`` applies
BN + ReLU to the last cell's output before the global pooling (``lastact``, lines 77 and 192)
and its pools carry no BN (``cell_operations.py`` ``POOLING``). At float64 and with the same
weights, our supernet with ``lastact=True, pool_bn=False`` computes the logits of a hand-written
forward of that layout and, where a checkout of AutoDL-Projects is given
(``AUTODL_PROJECTS=<its root>``), of the reference module itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from nas.supernet import build_supernet
from nas.supernet.darts import DartsSupernet

# our op names -> the reference's DARTS_SPACE names (cell_operations.py:96-105)
REF_NAMES = {
    "none": "none",
    "max_pool_3x3": "max_pool_3x3",
    "avg_pool_3x3": "avg_pool_3x3",
    "skip_connect": "skip_connect",
    "sep_conv_3x3": "dua_sepc_3x3",
    "sep_conv_5x5": "dua_sepc_5x5",
    "dil_conv_3x3": "dil_sepc_3x3",
    "dil_conv_5x5": "dil_sepc_5x5",
}
REF_SPACE = list(REF_NAMES.values())  # DARTS_SPACE's order
N = 2  # GDAS-NASNet-CIFAR.config: N=2, 6 cells


def _gdas_net() -> DartsSupernet:
    torch.manual_seed(0)
    net = build_supernet("darts", C=4, layers=3 * N, num_classes=10, lastact=True, pool_bn=False)
    assert isinstance(net, DartsSupernet)
    with torch.no_grad():  # affine BN parameters away from 1 / 0, so that they matter
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d) and m.affine:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return net.double().train()


def _weights(net: DartsSupernet, kind: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    out = {}
    for ct, (e, o) in net.arch_shapes().items():
        if kind == "one_hot":  # GDAS's forward: one op per edge
            index = torch.randint(o, (e,), generator=g)
            out[ct] = F.one_hot(index, o).double()
        else:  # every op, DARTS's forward_darts
            out[ct] = torch.softmax(torch.randn(e, o, generator=g, dtype=torch.float64), -1)
    return out


def _edge_keys(net: DartsSupernet) -> list[tuple[int, int, str]]:
    """(cell, edge, the reference's key "node<-input") of every edge."""
    keys = []
    for i, cell in enumerate(net.cells):
        for node, edges in enumerate(cell.edges_into):
            keys += [(i, e, f"{node}<-{cell.edge_src[e]}") for e in edges]
    return keys


def _layout_forward(net: DartsSupernet, x: torch.Tensor, weights: dict[str, torch.Tensor]):
    """The reference's layout written out: per node the sum of ``w_k * op_k(input)`` over its
    inputs (pools applied bare, no BN after them), the concat of the four nodes, then BN + ReLU
    (training statistics), global average pooling and the classifier."""
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        w = weights[cell.cell_type]
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            node = 0
            for e in edges:
                mixed, h = cell.ops[e], states[cell.edge_src[e]]
                for k, name in enumerate(mixed.op_names):
                    if w[e, k] == 0 or name == "none":
                        continue
                    if name == "avg_pool_3x3":
                        y = F.avg_pool2d(h, 3, mixed.stride, 1, count_include_pad=False)
                    elif name == "max_pool_3x3":
                        y = F.max_pool2d(h, 3, mixed.stride, 1)
                    else:
                        y = mixed.ops[k](h)
                    node = node + w[e, k] * y
            states.append(node)
        s0, s1 = s1, torch.cat(states[2:], dim=1)
    bn = net.lastact[0]
    out = F.relu(F.batch_norm(s1, None, None, bn.weight, bn.bias, training=True, eps=bn.eps))
    return net.classifier(out.mean((2, 3)))


@pytest.mark.parametrize("kind", ["one_hot", "dense"])
def test_gdas_layout_equals_the_written_out_reference_layout(kind):
    net = _gdas_net()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    w = _weights(net, kind)
    torch.testing.assert_close(net(x, w), _layout_forward(net, x, w), rtol=0, atol=1e-12)


def test_the_options_change_only_the_head_and_the_pools():
    darts = build_supernet("darts", C=4, layers=3, num_classes=10)
    assert isinstance(darts, DartsSupernet) and darts.lastact is None
    pool = darts.cells[0].ops[0].ops[1]
    assert isinstance(pool, nn.Sequential) and isinstance(pool[1], nn.BatchNorm2d)
    gdas = build_supernet("darts", C=4, layers=3, num_classes=10, lastact=True, pool_bn=False)
    assert isinstance(gdas, DartsSupernet)
    assert isinstance(gdas.cells[0].ops[0].ops[1], nn.MaxPool2d)
    assert isinstance(gdas.cells[0].ops[0].ops[2], nn.AvgPool2d)
    channels = gdas.classifier.in_features
    # the parameters differ by lastact's affine BN alone (the pools' BN has none)
    count = lambda n: sum(p.numel() for p in n.parameters())  # noqa: E731
    assert count(gdas) == count(darts) + 2 * channels


def test_nb201_refuses_the_darts_layout_options_in_one_line():
    for key in ("lastact", "pool_bn"):
        with pytest.raises(ValueError) as e:
            build_supernet("nb201", C=4, layers=1, num_classes=10, **{key: True})
        message = str(e.value)
        assert f"space.{key}" in message and "\n" not in message
    with pytest.raises(ValueError, match="space.lastact must be true or false"):
        build_supernet("darts", C=4, layers=3, num_classes=10, lastact="yes")  # type: ignore[arg-type]


# ------------------------------------------------------------------ the reference module


def _load_reference() -> types.ModuleType | None:
    """AutoDL's ``search_model_gdas_nasnet`` from a checkout (``AUTODL_PROJECTS``), loaded as
    a package of our naming so that its relative imports resolve without ``xautodl``'s own
    package (which imports much else); None when no checkout is given."""
    root = os.environ.get("AUTODL_PROJECTS")
    if not root:
        return None
    models = Path(root) / "xautodl" / "models"
    if not (models / "cell_searchs" / "search_model_gdas_nasnet.py").is_file():
        return None
    package = "_autodl_reference"
    for name, folder in ((package, models.parent), (f"{package}.models", models),
                         (f"{package}.models.cell_searchs", models / "cell_searchs")):  # fmt: skip
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        sys.modules[name] = module
    loaded = None
    for name, path in (
        ("models.cell_operations", models / "cell_operations.py"),
        ("models.cell_searchs.search_cells", models / "cell_searchs" / "search_cells.py"),
        (
            "models.cell_searchs.search_model_gdas_nasnet",
            models / "cell_searchs" / "search_model_gdas_nasnet.py",
        ),
    ):
        spec = importlib.util.spec_from_file_location(f"{package}.{name}", path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        spec.loader.exec_module(loaded)
    return loaded


@pytest.fixture
def reference():
    before = set(sys.modules)
    module = _load_reference()
    if module is None:
        pytest.skip("no AutoDL-Projects checkout (set AUTODL_PROJECTS=<its root>)")
    yield module
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _copy(ours: nn.Module, ref: nn.Module) -> None:
    """Our module's parameters into the reference's counterpart: convolutions in order (the
    reference's biases, ``bias=not affine``, are left as drawn: each is followed by a BN that
    subtracts it again in training mode), affine BNs, the classifier."""
    kinds = (nn.Conv2d, nn.BatchNorm2d, nn.Linear)
    a = [m for m in ours.modules() if isinstance(m, kinds)]
    b = [m for m in ref.modules() if isinstance(m, kinds)]
    assert [type(m) for m in a] == [type(m) for m in b]
    with torch.no_grad():
        for m, r in zip(a, b):
            if isinstance(m, nn.BatchNorm2d) and not m.affine:
                assert not r.affine
                continue
            r.weight.copy_(m.weight)
            if m.bias is not None:
                r.bias.copy_(m.bias)


@pytest.mark.parametrize("kind", ["one_hot", "dense"])
def test_gdas_layout_equals_the_reference_module(reference, kind):
    net = _gdas_net()
    ref = reference.NASNetworkGDAS(4, N, 4, 4, 3, 10, REF_SPACE, False, True).double().train()
    _copy(net.stem, ref.stem)
    for i, e, key in _edge_keys(net):
        for k, name in enumerate(net.cells[i].ops[e].op_names):
            theirs = ref.cells[i].edges[key]._ops[REF_SPACE.index(REF_NAMES[name])]
            _copy(net.cells[i].ops[e].ops[k], theirs)
    for ours, theirs in zip(net.cells, ref.cells):
        _copy(ours.preprocess0, theirs.preprocess0)
        _copy(ours.preprocess1, theirs.preprocess1)
    _copy(net.lastact, ref.lastact)
    _copy(net.classifier, ref.classifier)

    w = _weights(net, kind)
    # the same weights in the reference's edge and op order
    order = [REF_SPACE.index(REF_NAMES[name]) for name in net.cells[0].ops[0].op_names]
    ref_w = {}
    for ct, w_EO in w.items():
        cell = next(c for c in ref.cells if c.reduction == (ct == "reduce"))
        rows = torch.zeros_like(w_EO)
        ours = next(c for c in net.cells if c.cell_type == ct)
        for node, edges in enumerate(ours.edges_into):
            for e in edges:
                rows[cell.edge2index[f"{node}<-{ours.edge_src[e]}"], order] = w_EO[e]
        ref_w[ct] = rows
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    # the reference's forward (search_model_gdas_nasnet.py:185-195) with given weights in place
    # of its Gumbel draw: forward_gdas runs the argmax op of each edge times its weight
    s0 = s1 = ref.stem(x)
    for cell in ref.cells:
        rows = ref_w["reduce" if cell.reduction else "normal"]
        if kind == "one_hot":
            s0, s1 = s1, cell.forward_gdas(s0, s1, rows, rows.argmax(-1))
        else:
            s0, s1 = s1, cell.forward_darts(s0, s1, rows)
    logits = ref.classifier(ref.global_pooling(ref.lastact(s1)).flatten(1))
    torch.testing.assert_close(net(x, w), logits, rtol=0, atol=1e-10)


def test_the_gdas_experiment_builds_and_records_the_layout(tmp_path):
    """experiment=gdas_darts_cifar10 (here on the embedded data, at a tiny size): the run's
    config.yaml holds the options, and its supernet has the reference's head and pools."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nas.cli.search import CONFIG_DIR
    from nas.pipeline.search import SearchError, SearchRun

    overrides = ["experiment=gdas_darts_cifar10", "data=cifar10-mini", "space.C=4",
                 "space.layers=3", "batch_size=8", "data.max_items=32", "epochs=1",
                 "eval=false", "figures=false"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=overrides)
        nb201 = compose(config_name="nas_search", overrides=["space=nb201", "+space.pool_bn=false"])
    run = SearchRun(cfg, tmp_path / "gdas")
    net = run.supernet
    assert isinstance(net, DartsSupernet) and net.lastact is not None
    assert isinstance(net.cells[0].ops[0].ops[2], nn.AvgPool2d)
    assert run.strategy.clip_arch_with_weights
    run.run()
    saved = OmegaConf.load(tmp_path / "gdas" / "config.yaml")
    assert saved.space.lastact is True and saved.space.pool_bn is False
    assert saved.search.clip_arch_with_weights is True
    with pytest.raises(SearchError, match="space.pool_bn is not an option of the nb201 supernet"):
        SearchRun(nb201, tmp_path / "nb201")
