"""RS-WS selection: score random architectures with the shared weights, keep the best.

Fourth stage of the pipeline (``nas.selection``). Li & Talwalkar, UAI 2019, reference
``searchers/random_weight_share.py: get_eval_arch`` (liamcli/randomNAS_release, lines 81-115)
and ``darts_wrapper_discrete.py:180-219``:

* ``rounds`` rounds (null: the reference's ``max(1, floor(B / 10000))`` with B the search's
  weight steps); each draws ``archs`` uniform architectures (``nas.strategies.rsws.sample_arch``)
  and scores each by its accuracy on ``batches_per_arch`` batches of the architecture split,
  taken from one persistent iterator (every architecture sees different batches; the
  iterator restarts when the split runs out), with the supernet in eval mode;
* the ``top_k`` best of a round are scored again on the whole architecture split, and the best
  of them is the round's winner (``top_k: 0``: the quick score decides, as AutoDL's NB201
  RANDOM-NAS: 100 architectures on one batch of 512 images);
* the result is the best winner over **all** rounds. The reference's ``main`` returns round 0's
  winner only (``random_weight_share.py:161``), so its later rounds are computed and thrown
  away; this selector does what the loop was written for.

Data parallelism: each rank scores its share of every batch and the counts are summed once per
round (``all_reduce_sum``); the architectures come from a generator seeded by ``seed`` and the
round, the same on every rank. The progress (rounds done, best so far) is checkpointed after
each round, so an interrupted selection resumes where it stopped; a stop request (SIGTERM,
Ctrl-C) is honoured after the architecture being scored (the round is then redone on resume:
its architectures and batches are functions of the round, so the result is the same).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from nas.selection.base import SelectionContext, Selector
from nas.strategies.base import Batch, SearchStrategy
from nas.strategies.rsws import Arch, arch_weights_of, genotype_of, sample_arch
from search_spaces.genotype import AnyGenotype

# keys of the architecture split's batch orders: quick scores per round (and pass), full scores
QUICK_KEY = 710_000
FULL_KEY = 720_000
PASS_STRIDE = 1000


def _positive_int(name: str, v: Any, *, allow_zero: bool = False, allow_none: bool = False) -> None:
    if allow_none and v is None:
        return
    low = 0 if allow_zero else 1
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        what = "an int >= 0" if allow_zero else "a positive int"
        raise ValueError(
            f"selection.{name} must be {what}{' or null' if allow_none else ''}, got {v!r}"
        )


class RandomWeightSharingSelection(Selector):
    """Random architectures scored with the shared weights; the best over every round."""

    name = "rsws"

    def __init__(
        self,
        *,
        rounds: int | None = None,
        archs: int = 1000,
        batches_per_arch: int = 10,
        top_k: int = 10,
        steps_per_round: int = 10000,
        seed: int = 0,
    ) -> None:
        _positive_int("rounds", rounds, allow_none=True)
        _positive_int("archs", archs)
        _positive_int("batches_per_arch", batches_per_arch)
        _positive_int("top_k", top_k, allow_zero=True)
        _positive_int("steps_per_round", steps_per_round)
        self.rounds = rounds
        self.archs = archs
        self.batches_per_arch = batches_per_arch
        self.top_k = top_k
        self.steps_per_round = steps_per_round
        self.seed = int(seed)
        self.rounds_done = 0
        self.best: tuple[float, Arch] | None = None
        self.history: list[dict[str, Any]] = []

    def num_rounds(self, strategy: SearchStrategy) -> int:
        """``rounds``, or the reference's ``max(1, B // 10000)`` for B weight steps."""
        if self.rounds is not None:
            return self.rounds
        ctx = strategy.ctx
        budget = (ctx.epochs or 0) * (ctx.steps_per_epoch or 0)
        return max(1, budget // self.steps_per_round)

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        supernet = strategy.supernet
        if context is None:
            # outside the search loop (a notebook): one process, val_data is the whole split
            if val_data is None:
                raise ValueError("rsws selection needs the architecture split (val_data)")
            batches = list(val_data)
            full = lambda: iter(batches)  # noqa: E731
            quick_source = lambda r, p: iter(batches)  # noqa: E731
            reduce = lambda t: t  # noqa: E731
            parts = 1
        else:
            full = lambda: context.val_batches(key=FULL_KEY, limit=None)  # noqa: E731
            quick_source = lambda r, p: context.val_batches(  # noqa: E731
                key=QUICK_KEY + PASS_STRIDE * r + p, limit=None
            )
            reduce = context.all_reduce_sum
            # this rank's micro-batches of one global batch (the search loop's setting)
            parts = context.micro_batches
        # a stop request is honoured after the architecture being scored; the round is redone
        # on resume (its architectures and batches are functions of the round: the same)
        stop_point = context.stop_point if context is not None else (lambda: None)
        rounds = self.num_rounds(strategy)
        shapes = supernet.arch_shapes()
        device = next(supernet.parameters()).device
        was_training = supernet.training
        supernet.eval()  # the reference scores in eval mode (running batch-norm statistics)
        try:
            for r in range(self.rounds_done, rounds):
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + r)
                archs = [sample_arch(supernet, gen) for _ in range(self.archs)]
                bar = (
                    context.progress(
                        total=self.archs + self.top_k, desc=f"rsws round {r + 1}/{rounds}"
                    )  # fmt: skip
                    if context is not None
                    else None
                )

                def unit_done(bar: Any = bar) -> None:  # an architecture scored
                    if bar is not None:
                        bar.update(1)
                    stop_point()

                quick = self._quick_scores(
                    strategy, archs, shapes, device, quick_source, r, parts, reduce, unit_done
                )
                order = sorted(range(len(archs)), key=lambda i: -quick[i])
                if self.top_k:
                    top = order[: self.top_k]
                    scores = []
                    for i in top:
                        weights = arch_weights_of(archs[i], shapes, device)
                        scores.append(self._score(strategy, weights, full(), reduce))
                        unit_done()
                    j = max(range(len(top)), key=lambda t: scores[t])  # first of ties
                    winner, acc = archs[top[j]], scores[j]
                else:
                    winner, acc = archs[order[0]], quick[order[0]]
                if bar is not None:
                    bar.close()
                self.history.append({"round": r, "accuracy": acc})
                if self.best is None or acc > self.best[0]:
                    self.best = (acc, winner)
                self.rounds_done = r + 1
                if context is not None:
                    context.log("rsws_round", round=r, accuracy=acc, best=self.best[0])
                    context.checkpoint()
        finally:
            supernet.train(was_training)
        assert self.best is not None
        return genotype_of(supernet.space, self.best[1])

    @torch.no_grad()
    def _score(
        self,
        strategy: SearchStrategy,
        weights: Any,
        batches: Iterator[Batch],
        reduce: Any,
    ) -> float:
        correct, count = self._counts(strategy, weights, batches)
        device = next(strategy.supernet.parameters()).device
        sums = reduce(torch.tensor([correct, count], dtype=torch.float64, device=device))
        return float(sums[0]) / max(float(sums[1]), 1.0)

    @staticmethod
    def _counts(
        strategy: SearchStrategy, weights: Any, batches: Iterable[Batch]
    ) -> tuple[float, float]:
        correct = count = 0.0
        for x, y in batches:
            _, logits = strategy.loss((x, y), weights)
            correct += float((logits.argmax(1) == y).sum())
            count += int(y.shape[0])
        return correct, count

    @torch.no_grad()
    def _quick_scores(
        self,
        strategy: SearchStrategy,
        archs: list[Arch],
        shapes: dict[str, tuple[int, int]],
        device: torch.device,
        source: Any,
        r: int,
        parts: int,
        reduce: Any,
        stop_point: Any = lambda: None,
    ) -> list[float]:
        """Each architecture's accuracy on the next ``batches_per_arch`` global batches of a
        persistent iterator over the architecture split (restarted when it runs out)."""
        passes = 0
        it = source(r, passes)
        fresh = True  # nothing read since the iterator (re)started
        sums = torch.zeros(len(archs), 2, dtype=torch.float64)
        for a, arch in enumerate(archs):
            taken: list[Batch] = []
            while len(taken) < self.batches_per_arch * parts:
                try:
                    taken.append(next(it))
                    fresh = False
                except StopIteration:
                    if fresh:
                        raise ValueError("rsws selection got no validation batches") from None
                    passes += 1
                    it, fresh = source(r, passes), True
            weights = arch_weights_of(arch, shapes, device)
            sums[a] = torch.tensor(self._counts(strategy, weights, taken), dtype=torch.float64)
            stop_point()
        sums = reduce(sums.to(device)).cpu()
        return [float(c) / max(float(n), 1.0) for c, n in sums.tolist()]

    def state_dict(self) -> dict[str, Any]:
        return {"rounds_done": self.rounds_done, "best": self.best, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_done = int(state.get("rounds_done", 0))
        best = state.get("best")
        self.best = (
            None
            if best is None
            else (float(best[0]), {k: [tuple(p) for p in v] for k, v in best[1].items()})
        )
        self.history = list(state.get("history", []))
