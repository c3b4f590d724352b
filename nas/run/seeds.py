"""The seed streams of a run: every random draw of a search or a training run, named.

Run skeleton (``nas.run``). A resume is exact because nothing random depends on history: each
draw's seed is a pure function of the run seed and a position (epoch, step, batch, rank, ...),
mixed by NumPy's ``SeedSequence`` (``stream_seed``). The keys below separate the streams that
would otherwise collide; they are arbitrary but fixed (changing one changes every search of a
given seed), hence the odd primes and powers of ten, kept from the first release.
"""

from __future__ import annotations

import numpy as np


def stream_seed(*keys: int) -> int:
    """A well-mixed 63-bit seed from integer keys (run seed, epoch, stream, rank, ...)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(2, np.uint64)[0] >> 1)


# ----------------------------------------------------- search: the third key of stream_seed
WEIGHT_SPLIT = 0  # data order and augmentation of the weight half of the search data
ARCH_SPLIT = 1  # ... of the architecture half
EVAL_SPLIT = 2  # the architecture half read for the per-epoch evaluation
SELECTION_SPLIT = 3  # the architecture half read by a selector
STEP_DRAWS = 5  # a strategy's random draws of a global step (DrNAS's Dirichlet samples)
ARCH_DRAWS = 6  # arch_batch=random: the architecture batch of step s of epoch e, drawn anew
# (the fourth key: stream_seed(seed, e, 6, s))
EPOCH_RNG = 99  # the global Python / NumPy / torch generators at an epoch's start (+ rank)
RANK_STRIDE = 1000  # ... rank r of EPOCH_RNG: 99 + 1000 r
LOADER_WORKERS = 1000  # data-loader worker seeds: 1000 + split + 7919 x first batch
LOADER_START_STRIDE = 7919

# ----------------------------------------- search: the second key (the epoch's place)
ARCH_RESTART_STRIDE = 100003  # the architecture half restarted inside an epoch at step s
EVAL_EPOCH_BASE = 10**6  # per-epoch evaluation of epoch e: 10**6 + e
SELECTION_BASE = 2 * 10**6  # selectors' reads of the architecture half: 2 x 10**6 + key

# ------------------------------------------------------------------- selectors' own keys
PT_TUNE_BASE = 10**5  # DARTS-PT's fine-tuning epoch e: key 10**5 + e
PT_DECISION_STRIDE = 7919  # DARTS-PT's candidate measurement: seed x 7919 + decision
VARIANT_BATCH_STRIDE = 1_000_003  # one torch seed per (decision seed, batch) of a measurement
ZC_BATCH_BASE = 10**7  # Zero-Cost-PT's k-th fresh batch: key 10**7 + k

# ------------------------------------------------------------------------------ training
TRAIN_EPOCH_RNG = 99  # stream_seed(seed, epoch, rank, 99): the global generators of an epoch
TRAIN_LOADER = 1  # stream_seed(seed, epoch, rank, first batch, 1): the loader's workers
