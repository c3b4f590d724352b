"""Worker of the distributed-search tests, started by ``torchrun --nproc_per_node=2``.

``python -m torch.distributed.run --standalone --nproc_per_node=2 tests/search/dist_worker.py
CASE [RUN_DIR]`` runs one case on every rank and exits 0 when the rank saw what it should:

* ``collectives``: ``nas.distributed.sum_over_ranks`` / ``all_reduce_grads`` / ``spread`` on
  tensors that differ per rank, with gradients missing on one rank or on both;
* ``drift``: a tiny ``SearchRun`` whose architecture parameters are nudged on rank 1 only must
  fail its sync check on both ranks, with a message that says what drifted.
"""

from __future__ import annotations

import sys

import torch


def collectives() -> None:
    from nas import distributed as D

    rank = D.get_rank()
    assert D.get_world_size() == 2
    a = torch.full((2, 3), float(rank + 1))
    # entry 1: a gradient on rank 0 only; entry 2: on no rank
    values = [a, a[0] * 10 if rank == 0 else None, None]
    like = [torch.zeros(2, 3), torch.zeros(3), torch.zeros(4)]
    summed = D.sum_over_ranks(values, like)
    assert summed[0] is not None and torch.equal(summed[0], torch.full((2, 3), 3.0))
    assert summed[1] is not None and torch.equal(summed[1], torch.full((3,), 10.0))
    assert summed[2] is None

    p = torch.nn.Parameter(torch.zeros(3))
    q = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.full((3,), float(rank))
    q.grad = None if rank == 0 else torch.ones(2)  # SGD must see it on both ranks
    D.all_reduce_grads([p, q])
    assert p.grad is not None and torch.equal(p.grad, torch.ones(3))
    assert q.grad is not None and torch.equal(q.grad, torch.ones(2))

    same = torch.arange(5.0)
    assert D.spread([same]) == 0.0
    differs = same.clone()
    differs[3] += 0.25 * rank
    assert D.spread([same, differs]) == 0.25


def drift(run_dir: str) -> None:
    from hydra import compose, initialize_config_dir

    from nas import distributed as D
    from nas.cli.search import CONFIG_DIR
    from nas.pipeline.search import SearchError, SearchRun

    overrides = ["space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=overrides)
    run = SearchRun(cfg, run_dir)
    run._check_in_sync()  # identical after construction: passes
    if D.get_rank() == 1:
        with torch.no_grad():
            run.strategy.arch_parameters()[0][0, 0] += 1e-7
    try:
        run._check_in_sync()
    except SearchError as e:
        message = str(e)
        assert "no longer hold the same architecture parameters" in message, message
        assert "largest difference" in message, message
        if D.is_main():
            print(message, flush=True)
        return
    raise AssertionError(f"rank {D.get_rank()}: the drift went unnoticed")


def main() -> None:
    from nas import distributed as D

    case = sys.argv[1]
    env = D.env_from_torchrun()
    if case == "collectives":
        D.init_distributed(env, torch.device("cpu"))
        collectives()
    elif case == "drift":
        drift(sys.argv[2])
    else:
        raise SystemExit(f"unknown case {case!r}")
    D.shutdown()
    print(f"rank {env.rank}: ok", flush=True)


if __name__ == "__main__":
    main()
