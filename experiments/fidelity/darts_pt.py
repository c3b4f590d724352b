"""Fidelity of DARTS-PT (perturbation-based selection) against ruocwang/darts-pt (``sota/cnn``).

Wang, Cheng, Chen, Tang & Hsieh, "Rethinking Architecture Selection in Differentiable NAS",
ICLR 2021 (Alg. 1 and 2). Operation projection of an edge e (Alg. 1): with ``w = softmax(alpha)``
(decided edges fixed to their projection), the score of op o is the supernet's validation
accuracy (or loss) with ``w[e, o] = 0`` and the other weights of e left as they are, BN in
batch-statistics mode; the op kept is the one whose removal hurts most,
``argmin_o acc(w[e, o] = 0)`` (``argmax_o loss``; ties: the lower op index), and e becomes
one-hot on it. Topology projection of a node n (Alg. 2, DARTS-style spaces): each input edge
e of n is scored by the supernet with ``w[e] = 0`` alone (n's other edges present); while more
than two edges are left, drop the one whose removal leaves the highest accuracy (the lowest
loss; ties: the later edge): the two kept are the two whose removal hurts most. The reference's
rounds all see n's full weights (``project_edge`` zeroes the dropped edges only after its
loop), so the scores are not re-evaluated after a drop. Edges and nodes are taken in random
order, normal cell then reduction cell per projection; ``proj_intv`` fine-tuning epochs separate
the projections (``tune_epochs = proj_intv * (14 + 3 - 1) + 1`` on the DARTS space, a
projection at every epoch with ``epoch % proj_intv == 0`` or the last one; op projections
before ``proj_intv * 14``); the genotype is the DARTS parse of the projected weights.

Known answers (no checkout): on a float64 S5 supernet with random alphas, each op's score of an
operation projection (accuracy and loss) equals the supernet evaluated by hand with that op's
weight set to zero; the op chosen is the one whose removal lowers the accuracy most (the loss
criterion: raises the loss most) and the edge's weights become one-hot on it; a topology
projection keeps the edges the rule written out keeps (each edge's removal scored alone, the
best-after-removal edge dropped until two remain) with the same scores; the tuning schedule
(number of tuning epochs, which projection happens at which epoch, op then edge) equals the
reference's loop restated on the DARTS space and on NB201.

With ``--reference-root darts_pt=PATH`` (a checkout of github.com/ruocwang/darts-pt): the
reference's ``DartsNetworkProj`` (space ``s5``) at float64 with our weights and alphas, its
``projection.project_op`` / ``project_edge`` with its ``train_search.infer`` on the same
validation batches, fed our edge / node order (``selected_eid``; its ``np.random.choice``
answers with our node), compared on every op score and every edge score of a full projection
of a tiny supernet (14 op + 3 topology projections per cell type, no fine-tuning:
``proj_intv = 0`` here, the paper's projections without the epochs between them), on each op
chosen and each pair of edges kept, on the final genotype (``DartsNetworkProj.genotype``), for
the accuracy criterion (the paper's) and the loss criterion; and the settings of
``exp_scripts/darts-proj-sota.sh`` / ``train_search.py`` against ``experiment=pt_darts_cifar10``.
The reference scores accuracy in percent; ours are fractions (x 100 here).

    python experiments/fidelity/darts_pt.py --reference-root darts_pt=~/src/darts-pt

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/darts_pt.pt`` (``--record`` with the checkout writes them); ours runs
the same either way (the reference is fed our weights, alphas, batches and edge / node order).
"""

from __future__ import annotations

import copy
import os
import re
import sys
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from nas.plugins import build_strategy
from nas.selection.perturbation import PerturbationSelection
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet

METHOD = "DARTS-PT"
REFERENCES = {"darts_pt": F.Reference("ruocwang/darts-pt", "sota/cnn/projection.py")}
C, LAYERS, CLASSES = 4, 3, 10  # a normal cell, then two reduction cells (layers // 3, 2 // 3)
LR, MOMENTUM, WD = 0.025, 0.9, 3e-4
CELL_TYPES = ("normal", "reduce")
PRIMITIVES_KEY = {"normal": "primitives_normal", "reduce": "primitives_reduct"}  # spaces.py


class Context:
    """The search loop's services for a selection without tuning: fixed validation batches."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.batches = batches
        self.search_lr = LR
        self.micro_batches = 1
        self.events: list[dict[str, Any]] = []

    def val_batches(self, *, key: int, limit: int | None):
        del key
        yield from self.batches[: limit or len(self.batches)]

    def train_epoch(self, **kwargs: Any) -> dict[str, float]:
        raise AssertionError("proj_intv 0: no tuning")

    def reset_weight_optimizer(self, lr: float) -> None:
        pass

    def stop_point(self) -> None:  # no stop is requested in a comparison
        pass

    def checkpoint(self) -> None:
        pass

    def log(self, event: str, **values: Any) -> None:
        self.events.append({"event": event, **values})

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def broadcast(self, obj: Any) -> Any:
        return obj


def ours(seed: int = 0, space: str = "s5") -> tuple[Any, nn.Module]:
    """Our DARTS strategy on a float64 supernet, random alphas far from uniform."""
    cfg = F.compose(["search=darts", f"space={space}"])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    net = build_supernet(space, C=C, layers=LAYERS, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=50))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net


def selector(criterion: str = "acc", seed: int = 0) -> PerturbationSelection:
    return PerturbationSelection(proj_intv=0, criterion=criterion, seed=seed)


# ------------------------------------------------------------------------------ known answers


def by_hand(net: nn.Module, weights: dict[str, torch.Tensor], batches) -> tuple[float, float]:
    """(accuracy, mean loss) of the supernet under ``weights``, BN on batch statistics, the
    running statistics left as they were."""
    saved = copy.deepcopy(net.state_dict())
    was = net.training
    net.train()
    correct = loss = 0.0
    count = 0
    with torch.no_grad():
        for x, y in batches:
            logits = net(x, weights)
            loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += float((logits.argmax(1) == y).sum())
            count += int(y.shape[0])
    net.load_state_dict(saved)
    net.train(was)
    return correct / count, loss / count


def _weights(strategy: Any) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {k: v.detach().clone() for k, v in strategy.arch_weights(sample=False).items()}


def reference_schedule(proj_intv: int, num_projs: int, tune_epochs: int, op_projs: int):
    """The reference's loop (``pt_project``): per epoch, how many projections are done once
    it has started, and the kind of each projection in order."""
    done, kinds, due = 0, [], []
    for epoch in range(tune_epochs):
        if epoch % proj_intv == 0 or epoch == tune_epochs - 1:
            kinds.append("op" if epoch < proj_intv * op_projs else "edge")
            done += 1
        due.append(done)
    return due, kinds


def known_answers(table: F.Table) -> None:
    batches = F.batches(2, hw=8, seed=3)

    for criterion in ("acc", "loss"):
        strategy, net = ours(seed=0)
        sel = selector(criterion)
        ctx = Context(batches)
        sel.attach(strategy)
        base = _weights(strategy)
        d = sel.project_op(ctx, strategy, "normal")
        e = d["edge"]
        hand = []
        for k in range(base["normal"].shape[1]):
            w = {ct: t.clone() for ct, t in base.items()}
            w["normal"][e, k] = 0.0
            hand.append(by_hand(net, w, batches))
        table.add(METHOD, f"{criterion}: op scores (accuracy) = the supernet with the op masked",
                  d["acc"], [h[0] for h in hand])  # fmt: skip
        table.add(METHOD, f"{criterion}: op scores (loss) = the supernet with the op masked",
                  d["loss"], [h[1] for h in hand])  # fmt: skip
        if criterion == "acc":
            best = min(range(len(hand)), key=lambda i: (hand[i][0], i))
        else:
            best = max(range(len(hand)), key=lambda i: (hand[i][1], -i))
        ops = net.space.cells["normal"].edges[e].ops
        table.add_equal(METHOD, f"{criterion}: op chosen = the removal that hurts most",
                        d["chosen"], ops[best])  # fmt: skip
        onehot = torch.zeros(len(ops), dtype=torch.float64)
        onehot[best] = 1.0
        table.add(METHOD, f"{criterion}: projected edge's weights one-hot",
                  _weights(strategy)["normal"][e], onehot)  # fmt: skip

        # topology projection of one node, on top of the op projection
        base = _weights(strategy)
        t = sel.project_topology(ctx, strategy, "normal")
        cell = net.space.cells["normal"]
        eids = [edge.index for edge in cell.edges_into(t["node"])]
        alone = {}  # each input edge removed alone, the node's other edges present
        for edge in eids:
            v = {ct: x.clone() for ct, x in base.items()}
            v["normal"][edge] = 0.0
            alone[edge] = by_hand(net, v, batches)
        scores = []
        while len(eids) > 2:  # drop the best-after-removal edge (ties: the later) until two
            round_scores = [alone[edge] for edge in eids]
            scores.append(round_scores)
            i = (
                max(range(len(eids)), key=lambda i: (round_scores[i][0], i))
                if criterion == "acc"
                else max(range(len(eids)), key=lambda i: (-round_scores[i][1], i))
            )
            del eids[i]
        table.add(METHOD, f"{criterion}: edge scores = the supernet with the edge masked",
                  [[r["acc"], r["loss"]] for r in t["rounds"]],
                  [[[s[0] for s in r], [s[1] for s in r]] for r in scores])  # fmt: skip
        table.add_equal(METHOD, f"{criterion}: edges kept = the rule written out (two best)",
                        t["kept"], eids)  # fmt: skip

    # the tuning schedule: sota/cnn/projection.py (14 op + 3 node projections, +1 epoch) and
    # nasbench201/projection.py (6 op projections, proj_intv * (6 - 1) epochs)
    for space, ref_tune, projs, op_projs in (("s5", 5 * 16 + 1, 17, 14), ("nb201", 5 * 5, 6, 6)):
        strategy, _ = ours(seed=0, space=space) if space == "s5" else _nb201()
        sel = PerturbationSelection(proj_intv=5)
        due, kinds = reference_schedule(5, projs, ref_tune, op_projs)
        table.add_equal(METHOD, f"{space}: tuning epochs (proj_intv 5)",
                        sel.tune_epochs(strategy), ref_tune)  # fmt: skip
        ours_due = [sel.projections_due(strategy, e) for e in range(ref_tune)]
        table.add_equal(METHOD, f"{space}: projections done by each tuning epoch", ours_due, due)
        table.add_equal(METHOD, f"{space}: kind of each projection (op / edge)",
                        sel.projection_plan(strategy), kinds)  # fmt: skip


def _nb201() -> tuple[Any, nn.Module]:
    cfg = F.compose(["search=darts", "space=nb201"])
    strategy = build_strategy(cfg)
    net = build_supernet("nb201", C=4, layers=1, num_classes=CLASSES).double()
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=LR), 5.0))
    return strategy, net


# ---------------------------------------------------------------------------- the reference


class _Choice:
    """Stands in for the reference's ``np.random`` in ``projection.py``: answers with our
    node (the reference passes ``remain_nids``; ours must be among them)."""

    def __init__(self) -> None:
        self.answer: int | None = None

    def choice(self, options: Any, size: int = 1) -> list[int]:
        assert self.answer is not None and self.answer in list(options), (self.answer, options)
        return [self.answer]


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("darts_pt")  # else the reference's values come from its recording
    ref_label = refs.label("darts_pt")
    batches = F.batches(1, size=16, hw=8, seed=3)
    defaults: dict[str, Any] = {}
    sh = ""
    sh_args: dict[str, str] = {}
    script = ""
    if live:
        root = refs.root("darts_pt")
        script = os.path.join(root, "sota", "cnn", "train_search.py")
        defaults = F.script_defaults(script)
        with open(os.path.join(root, "exp_scripts", "darts-proj-sota.sh"), encoding="utf-8") as f:
            sh = f.read()
        # the paper's run: --edge_decision random --proj_crit_* $crit (acc) --proj_intv 5
        sh_args = dict(re.findall(r"--(\w+) ([^\s\\]+)", sh.split("python train_search.py", 1)[1]))

    with refs.imports("darts_pt", os.path.join("sota", "cnn"), [""]), F.float64():
        import logging

        if live:
            import nasbench201.utils as ig_utils  # type: ignore[import-not-found]
            from sota.cnn import projection  # type: ignore[import-not-found]
            from sota.cnn.model_search_darts_proj import (  # type: ignore[import-not-found]
                DartsNetworkProj,
            )
            from sota.cnn.spaces import spaces_dict  # type: ignore[import-not-found]

            choice = _Choice()
            projection.np = SimpleNamespace(random=choice)  # this module's copy only
            logging.disable(logging.INFO)
        for criterion in ("acc", "loss"):
            strategy, net = ours(seed=0)
            model: Any = None
            if live:
                args = SimpleNamespace(**defaults)
                args.edge_decision = "random"
                args.proj_crit = {"normal": criterion, "reduce": criterion}
                namespace = {"args": args, "torch": torch, "ig_utils": ig_utils,
                             "logging": logging}  # fmt: skip
                infer = F.load_function(script, "infer", namespace)
                recorded: list[tuple[float, float]] = []

                def recording_infer(*a: Any, infer: Any = infer, recorded: list = recorded,
                                    **k: Any):  # fmt: skip
                    out = infer(*a, **k)
                    recorded.append((float(out[0]), float(out[1])))
                    return out

                model = DartsNetworkProj(C, CLASSES, LAYERS, nn.CrossEntropyLoss(),
                                         spaces_dict["s5"], args).double()  # fmt: skip
                F.copy_weights(net, model)
                with torch.no_grad():
                    model.alphas_normal.copy_(strategy.arch_params["normal"])
                    model.alphas_reduce.copy_(strategy.arch_params["reduce"])

            ctx = Context(batches)
            genotype = selector(criterion).select(strategy, context=ctx)
            decisions = [e for e in ctx.events if e["event"] == "pt_decision"]
            op_scores: tuple[list[Any], list[Any]] = ([], [])
            edge_scores: tuple[list[Any], list[Any]] = ([], [])
            chosen: tuple[list[Any], list[Any]] = ([], [])
            for d in decisions:
                ct = d["cell_type"]
                if d["kind"] == "op":
                    op_scores[0].append([[100 * a for a in d["acc"]], d["loss"]])
                    chosen[0].append((ct, d["edge"], d["chosen"]))
                else:
                    ours_rounds = [[[100 * a for a in r["acc"]], r["loss"]] for r in d["rounds"]]
                    edge_scores[0].append(ours_rounds)
                    chosen[0].append((ct, d["node"], list(d["kept"])))
                if not live:
                    continue
                # the reference, fed our edge / node, on the same batches
                recorded.clear()
                if d["kind"] == "op":
                    eid, opid = projection.project_op(
                        model, batches, args, recording_infer, cell_type=ct, selected_eid=d["edge"]
                    )
                    model.project_op(eid, opid, cell_type=ct)
                    op_scores[1].append([[r[0] for r in recorded], [r[1] for r in recorded]])
                    names = model.op_names[PRIMITIVES_KEY[ct]][eid]
                    chosen[1].append((ct, int(eid), names[opid]))
                else:
                    choice.answer = d["node"] - 3  # nodes 3, 4, 5 are the reference's 0, 1, 2
                    nid, eids = projection.project_edge(model, batches, args, recording_infer,
                                                        cell_type=ct)  # fmt: skip
                    model.project_edge(nid, eids, cell_type=ct)
                    it = iter(recorded)
                    edge_scores[1].append([
                        list(map(list, zip(*[next(it) for _ in r["edges"]])))
                        for r in d["rounds"]
                    ])  # fmt: skip
                    chosen[1].append((ct, int(nid) + 3, [int(e) for e in eids]))
            table.add(METHOD, f"{criterion}: every op score (accuracy %, loss), 28 edges",
                      op_scores[0], lambda: op_scores[1], ref_label)  # fmt: skip
            table.add(METHOD, f"{criterion}: every edge score (accuracy %, loss), 6 nodes",
                      edge_scores[0], lambda: edge_scores[1], ref_label)  # fmt: skip
            table.add_equal(METHOD, f"{criterion}: op chosen per edge, edges kept per node",
                            chosen[0], lambda: chosen[1], ref_label)  # fmt: skip
            table.add_equal(METHOD, f"{criterion}: genotype after the full projection",
                            [list(genotype.normal), list(genotype.reduce)],
                            lambda: [[tuple(p) for p in model.genotype().normal],
                                     [tuple(p) for p in model.genotype().reduce]],
                            ref_label)  # fmt: skip
        if live:
            logging.disable(logging.NOTSET)

    cfg = F.compose(["experiment=pt_darts_cifar10"])
    sel = cfg.selection

    def crit() -> str:
        return re.search(r"crit=\$\{crit:-'(\w+)'\}", sh).group(1)  # type: ignore[union-attr]

    F.add_settings(
        table,
        METHOD,
        {
            "space (--search_space)": cfg.space.name,
            "supernet epochs (--resume_epoch of the script)": cfg.epochs,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.optimizer.lr,
            "momentum": cfg.optimizer.momentum,
            "weight_decay": cfg.optimizer.weight_decay,
            "grad_clip": cfg.optimizer.grad_clip,
            "init_channels": cfg.space.C,
            "layers": cfg.space.layers,
            "proj_intv (the script's)": sel.proj_intv,
            "proj_crit_normal": sel.criterion,
            "proj_crit_reduce": sel.criterion,
            "tuning lr constant (its scheduler is never stepped)": sel.tune_lr_schedule,
        },
        lambda: {
            "space (--search_space)": defaults["search_space"]
            if sh_args.get("search_space", "$space") == "$space"
            else sh_args["search_space"],
            "supernet epochs (--resume_epoch of the script)": int(
                re.search(r"resume_epoch=\$\{resume_epoch:-(\d+)\}", sh).group(1)  # type: ignore[union-attr]
            ),
            "batch_size": defaults["batch_size"],
            "learning_rate": defaults["learning_rate"],
            "momentum": defaults["momentum"],
            "weight_decay": defaults["weight_decay"],
            "grad_clip": defaults["grad_clip"],
            "init_channels": defaults["init_channels"],
            "layers": defaults["layers"],
            "proj_intv (the script's)": int(sh_args["proj_intv"]),
            "proj_crit_normal": crit(),
            "proj_crit_reduce": crit(),
            "tuning lr constant (its scheduler is never stepped)": "constant",
        },
        ref_label,
    )
    table.add(METHOD, "setting: tuning lr (reset_optimizer: learning_rate / 10)",
              cfg.optimizer.lr * sel.tune_lr_factor, lambda: defaults["learning_rate"] / 10,
              ref_label)  # fmt: skip
    table.add_equal(METHOD, "setting: edge_decision (the script's: random)",
                    "random", lambda: sh_args["edge_decision"], ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
