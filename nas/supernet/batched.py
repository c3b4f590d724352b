"""Weight variants of a supernet evaluated as one batch (DARTS-PT's candidates of one edge).

Second stage of the pipeline (``nas.supernet``). Perturbation-based selection (DARTS-PT, Wang et
al., ICLR 2021) scores every candidate of an edge by evaluating the supernet under mixing weights
that differ from the current ones in one row (an op removed) or a few rows (an edge removed) of
one cell type. ``BatchedVariants`` runs those n evaluations as one forward of the part of the
supernet that depends on the weights: its input repeated n times along the batch dimension
(``repeat``), chunk i (samples ``i*B .. (i+1)*B - 1``) standing for variant i, and within
``BatchedVariants.chunks()`` every chunk computes what variant i's own forward computes:

* batch norm in batch-statistics mode normalises each chunk by the chunk's own per-channel mean
  and biased variance, in one pass per layer over the batch viewed as ``(n, B, C, ...)`` (NCHW
  and channels-last alike). ``torch.nn.functional.batch_norm`` is replaced for the duration, so
  every batch norm module and any code that calls it directly (the fused convolutions of
  ``nas.supernet.fused``) normalise per chunk; running statistics are not updated (the callers
  freeze them anyway, as DARTS-PT's evaluation does);
* the mixing weights: ``weights`` hands the supernet, for the varied cell type, a tensor whose
  varied rows are placeholders (NaN where some variant runs the op, 0 elsewhere), so that an op
  runs when it runs in any variant (``Supernet.active_ops``), and every ``MixedOp`` that gets
  such a row (``MixedOp.chunked``) weights chunk i's op outputs by variant i's row, 0 where
  variant i does not run the op (masked, or of weight 0 unless ``zero_weight_ops_run``). Adding
  a zero term leaves a float sum as it was, so each chunk's sum is the variant's own sum;
* random draws: a module that draws random numbers (one whose class sets
  ``draws_random_numbers``, and dropout in training mode) runs chunk by chunk, each chunk from a
  generator state of its own that follows the draws variant i's own forward makes (a random op
  variant i does not run draws nothing for it, so its later draws are as in that forward). The
  chunks start from the generator state the caller leaves before the forward, and the generator
  is left where the last variant's forward leaves it.

The supernet must hand its mixed ops rows of the tensor it is given (views such as
``weights_EO.unbind(0)``); a varied row that no mixed op received raises an error after the
forward rather than leaving chunks unweighted. What cannot be batched is refused in one line by
``check_batchable``: forward hooks (they would see the n*B batch) and ``SyncBatchNorm`` (its
statistics bypass ``batch_norm``). An op output that is infinite or NaN in a chunk whose weight
for it is 0 would make that chunk NaN (0 * inf), where the variant's forward skips the op.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules import module as _module

from nas.supernet.network import ArchWeights, Supernet


def _hooked(m: nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks)


def check_batchable(supernet: Supernet) -> None:
    """A one-line ValueError if ``supernet``'s candidates cannot be evaluated as one batch."""
    if _module._global_forward_hooks or _module._global_forward_pre_hooks:
        raise ValueError(
            "batched candidates: global module forward hooks are registered (they would see "
            "every candidate's batch at once); remove them or turn batch_candidates off"
        )
    if any(op.entangled for op in supernet.mixed_ops()):
        raise ValueError(
            "batched candidates: the supernet's ops are weight-entangled (a group runs as one "
            "op on mixed kernels, which a per-candidate weighting cannot split); expected "
            "batch_candidates off"
        )
    for name, m in supernet.named_modules():
        if _hooked(m):
            raise ValueError(
                f"batched candidates: module {name or type(m).__name__!r} has a forward hook "
                "(it would see every candidate's batch at once); remove it or turn "
                "batch_candidates off"
            )
        if isinstance(m, nn.SyncBatchNorm):
            raise ValueError(
                f"batched candidates: {name!r} is a SyncBatchNorm, whose statistics cannot be "
                "taken per candidate; turn batch_candidates off"
            )


def draws_random_numbers(m: nn.Module) -> bool:
    """Whether ``m``'s forward draws random numbers (declared by its class, or dropout)."""
    if getattr(m, "draws_random_numbers", False):
        return True
    return isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0


def _layout(t: Tensor) -> torch.memory_format:
    if (
        t.dim() == 4
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
    ):
        return torch.channels_last
    return torch.contiguous_format


def repeat_chunks(t: Tensor, n: int) -> Tensor:
    """``t`` [B, ...] repeated ``n`` times along the batch dimension, in ``t``'s layout."""
    out = torch.empty(
        (n * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device, memory_format=_layout(t)
    )
    out.view(n, *t.shape).copy_(t.unsqueeze(0).expand(n, *t.shape))
    return out


def _chunks(t: Tensor, n: int) -> Tensor:
    """``t`` [n*B, ...] viewed as [n, B, ...] (a view in NCHW and channels-last alike)."""
    return t.view(n, t.shape[0] // n, *t.shape[1:])


class _RNG:
    """The state of the generator that draws on ``device`` (the CPU's, or the accelerator's)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.module: Any = None if device.type == "cpu" else torch.get_device_module(device)

    def get(self) -> Tensor:
        if self.module is None:
            return torch.get_rng_state()
        state: Tensor = self.module.get_rng_state(self.device)
        return state

    def set(self, state: Tensor) -> None:
        if self.module is None:
            torch.set_rng_state(state)
        else:
            self.module.set_rng_state(state, self.device)


def device_rng(device: torch.device) -> _RNG:
    """Get / set the state of the generator that draws on ``device``."""
    return _RNG(device)


class _Row:
    """One varied row of the mixing weights: per chunk, each op's weight (0 where the chunk's
    variant does not run the op) and whether the op runs."""

    def __init__(self, owner: BatchedVariants, weights_nO: Tensor, runs_nO: Tensor) -> None:
        self.owner = owner
        self.effective = torch.where(runs_nO, weights_nO, torch.zeros_like(weights_nO))
        self.runs = runs_nO.T.tolist()  # op -> chunk -> bool
        self._cache: dict[tuple[int, ...], Tensor] = {}

    @contextmanager
    def running(self, k: int) -> Iterator[None]:
        """Within: the random modules of op ``k`` draw for the chunks that run it alone."""
        saved = self.owner._running
        self.owner._running = self.runs[k]
        try:
            yield
        finally:
            self.owner._running = saved

    def weighted_sum(self, acc: Tensor | None, ops: list[int], ys: list[Tensor]) -> Tensor:
        """``acc + sum_j w_i[ops[j]] * ys[j]`` for each chunk i, in the order of ``MixedOp``'s
        own sum (a chunk's zero terms add exact zeros)."""
        key = tuple(ops)
        w = self._cache.get(key)
        if w is None:
            w = self.effective[:, ops].to(device=ys[0].device, dtype=ys[0].dtype)
            self._cache[key] = w
        n = w.shape[0]
        shape = (n,) + (1,) * ys[0].dim()
        first = _chunks(ys[0], n)
        if acc is None:
            out = first * w[:, 0].view(shape)
        else:
            out = torch.addcmul(_chunks(acc, n), first, w[:, 0].view(shape))
        for j in range(1, len(ops)):
            out.addcmul_(_chunks(ys[j], n), w[:, j].view(shape))
        return out.view(ys[0].shape).contiguous(memory_format=_layout(ys[0]))


class BatchedVariants:
    """``variants`` (mixing weights that differ only in ``cell_type``'s) as chunks of a batch.

    ``repeat(state)``: the suffix's input, each tensor repeated once per variant; ``weights``:
    what the supernet is run with; ``chunks()``: the context in which its forward computes
    every variant's own forward chunk by chunk (see the module docstring)."""

    def __init__(self, supernet: Supernet, variants: Sequence[ArchWeights], cell_type: str) -> None:
        if not variants:
            raise ValueError("batched candidates: no variants to evaluate")
        check_batchable(supernet)
        base = variants[0]
        for v in variants[1:]:
            for ct, w in base.items():
                if ct != cell_type and not torch.equal(v[ct], w):
                    raise ValueError(
                        f"batched candidates: the variants differ in {ct!r}'s weights, not "
                        f"only in {cell_type!r}'s"
                    )
        self.supernet = supernet
        self.n = len(variants)
        stacked = torch.stack([v[cell_type].detach() for v in variants])  # [n, E, O]
        varied = (stacked != stacked[0]).flatten(2).any(2).any(0)  # [E]
        self.varied = [int(e) for e in varied.nonzero().flatten().tolist()]
        # which ops each variant runs: as the supernet decides for that variant's forward
        runs = torch.tensor(
            [supernet.active_ops({cell_type: v[cell_type]})[cell_type] for v in variants],
            dtype=torch.bool,
            device=stacked.device,
        )  # [n, E, O]
        placeholder = stacked[0].clone()
        for e in self.varied:
            nan = torch.full_like(placeholder[e], float("nan"))
            placeholder[e] = torch.where(runs[:, e].any(0), nan, torch.zeros_like(nan))
        self.placeholder = placeholder
        self.weights: ArchWeights = {**base, cell_type: placeholder}
        self.rows = {e: _Row(self, stacked[:, e], runs[:, e]) for e in self.varied}
        self.served: set[int] = set()
        self._running: list[bool] | None = None  # the chunks that run the current op
        self._states: list[Tensor] = []

    def repeat(self, state: Any) -> Any:
        """A prefix state (a tensor, or a tuple / list of them) repeated once per variant."""
        if isinstance(state, Tensor):
            return repeat_chunks(state, self.n)
        if isinstance(state, (tuple, list)):
            return type(state)(self.repeat(s) for s in state)
        raise TypeError(f"batched candidates: cannot repeat a prefix state of {type(state)}")

    def row(self, weights_O: Tensor) -> _Row | None:
        """The varied row ``weights_O`` is a view of, or None (a row shared by every chunk)."""
        p = self.placeholder
        if weights_O.dim() != 1 or weights_O.untyped_storage().data_ptr() != (
            p.untyped_storage().data_ptr()
        ):
            return None
        e, rest = divmod(int(weights_O.storage_offset()) - int(p.storage_offset()), p.stride(0))
        row = self.rows.get(e) if rest == 0 else None
        if row is not None:
            self.served.add(e)
        return row

    # ---------------------------------------------------------------- the context

    def _batch_norm(self, original: Any) -> Any:
        n = self.n

        def batch_norm(
            input: Tensor,
            running_mean: Tensor | None,
            running_var: Tensor | None,
            weight: Tensor | None = None,
            bias: Tensor | None = None,
            training: bool = False,
            momentum: float = 0.1,
            eps: float = 1e-5,
        ) -> Tensor:
            if not training and running_mean is not None:  # running statistics: per sample
                return original(
                    input, running_mean, running_var, weight, bias, training, momentum, eps
                )
            if input.shape[0] % n:
                raise ValueError(
                    f"batched candidates: a batch norm got {input.shape[0]} samples, not a "
                    f"multiple of the {n} candidates"
                )
            x = _chunks(input, n)  # [n, B, C, ...]
            if x.dtype in (torch.float16, torch.bfloat16):
                x = x.float()  # half precision normalised in float32, as the BN kernels do
            per_channel = (n, 1, -1) + (1,) * (x.dim() - 3)
            if x.dim() == 5 and _layout(input) == torch.channels_last:
                # channels innermost: reduce [n, B*H*W, C] over its middle dim (a view)
                flat = x.permute(0, 1, 3, 4, 2).reshape(n, -1, x.shape[2])
                dims: tuple[int, ...] = (1,)
            else:
                flat = x.reshape(n, x.shape[1], x.shape[2], -1)
                dims = (1, 3)
            # two passes (mean, then the mean squared deviation): torch's one-pass var_mean
            # over these dims is several times slower on a CPU
            mean = flat.mean(dim=dims, keepdim=True)
            var = (flat - mean).square_().mean(dim=dims)
            mean = mean.squeeze(dims)
            var, mean = var.view(per_channel), mean.view(per_channel)
            scale = torch.rsqrt(var + eps)
            channel = (1, 1, -1) + (1,) * (x.dim() - 3)
            if weight is not None:
                scale = scale * weight.view(channel)
            shift = -mean * scale
            if bias is not None:
                shift = shift + bias.view(channel)
            out = torch.addcmul(shift, x, scale).to(input.dtype)
            return out.view(input.shape).contiguous(memory_format=_layout(input))

        return batch_norm

    def _random_forward(self, module: nn.Module, rng: _RNG) -> Any:
        forward = module.forward
        n = self.n

        def chunked_forward(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            runs = self._running or [True] * n
            outside = rng.get()
            ys: dict[int, Tensor] = {}
            for i, chunk in enumerate(_chunks(x, n)):
                if runs[i]:
                    rng.set(self._states[i])
                    ys[i] = forward(chunk, *args, **kwargs)
                    self._states[i] = rng.get()
            rng.set(outside)
            y0 = next(iter(ys.values()))
            out = torch.empty(
                (x.shape[0], *y0.shape[1:]),
                dtype=y0.dtype,
                device=y0.device,
                memory_format=_layout(y0),
            )
            for i, part in enumerate(_chunks(out, n)):
                if i in ys:
                    part.copy_(ys[i])
                else:
                    part.zero_()
            return out

        return chunked_forward

    @contextmanager
    def chunks(self, device: torch.device) -> Iterator[None]:
        """Within: one forward of the supernet on the repeated batch (on ``device``) computes
        each variant's forward in its chunk; the generator (``device``'s) is left where the
        last variant's forward leaves it."""
        rng = device_rng(device)
        start = rng.get()
        self._states = [start] * self.n
        self.served = set()
        randoms = [m for m in self.supernet.modules() if draws_random_numbers(m)]
        mixed = self.supernet.mixed_ops()
        original = F.batch_norm
        F.batch_norm = self._batch_norm(original)
        own = [m.__dict__.get("forward") for m in randoms]  # an instance's own forward
        try:
            for m in randoms:
                m.forward = self._random_forward(m, rng)
            for op in mixed:
                op.chunked = self
            yield
            if not torch.equal(rng.get(), start):
                raise RuntimeError(
                    "batched candidates: the supernet drew random numbers outside a module "
                    "that declares it (draws_random_numbers); turn batch_candidates off"
                )
            missing = sorted(set(self.varied) - self.served)
            if missing:
                raise RuntimeError(
                    f"batched candidates: no mixed op received the varied weight rows {missing} "
                    "(the supernet copies its weights); turn batch_candidates off"
                )
            rng.set(self._states[-1])
        finally:
            F.batch_norm = original
            for m, forward in zip(randoms, own):
                if forward is None:
                    m.__dict__.pop("forward", None)
                else:
                    m.forward = forward
            for op in mixed:
                op.chunked = None
