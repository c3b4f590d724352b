"""The names of the primitive operations, without the operations (no torch).

``search_spaces.ops`` builds the operations (``OPS``: name -> factory, in the order of
``OP_NAMES``); genotypes and spaces only need the names, and the NAS-Bench-201 lookup parses
arch strings without importing torch (``nas-bench query`` answers in a fraction of a second).
"""

from __future__ import annotations

DARTS_OPS: tuple[str, ...] = (
    "none",
    "max_pool_3x3",
    "avg_pool_3x3",
    "skip_connect",
    "sep_conv_3x3",
    "sep_conv_5x5",
    "dil_conv_3x3",
    "dil_conv_5x5",
)
NB201_OPS: tuple[str, ...] = (
    "none",
    "skip_connect",
    "nor_conv_1x1",
    "nor_conv_3x3",
    "avg_pool_3x3",
)
# every operation of search_spaces.ops.OPS, in its order (RobustDARTS S4 adds "noise")
OP_NAMES: tuple[str, ...] = (*DARTS_OPS, "noise", "nor_conv_1x1", "nor_conv_3x3")


def kind_and_kernel(op: str, kinds: tuple[str, ...]) -> tuple[str, int] | None:
    """``(kind, K)`` of an op named ``<kind>_KxK`` with ``kind`` in ``kinds`` (the ops that
    differ from the others of their kind only in their kernel size); None otherwise."""
    kind, _, size = op.rpartition("_")
    if kind not in kinds:
        return None
    k1, _, k2 = size.partition("x")
    if not (k1.isdigit() and k1 == k2):
        return None
    return kind, int(k1)
