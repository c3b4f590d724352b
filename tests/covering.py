"""Pairwise covering arrays: few rows in which every pair of values of any two factors meets.

A test over several factors (family, strategy, selector, component) grows as their product;
a covering array of strength 2 keeps one row for a handful of pairs instead, so every value
of each factor still meets every value of every other factor in some row, and a new plug-in
adds a few rows, not a product. The construction is the greedy one of AETG (Cohen et al.,
"The AETG System", IEEE TSE 1997), made deterministic: each new row starts from the first
pair still uncovered (in factor and value order) and fills the other factors one by one with
the value that covers most uncovered pairs with the values already chosen (ties: the first
value). The same factors always give the same rows, so a test id names the same run on every
machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations, product
from typing import TypeVar

T = TypeVar("T")


def pairwise(factors: Sequence[Sequence[T]]) -> list[tuple[T, ...]]:
    """Rows (one value per factor) that cover every pair of values of every two factors.

    ``factors`` lists each factor's values; a factor with one value is always that value.
    With fewer than two factors, or an empty one, the rows are the full product.
    """
    sizes = [len(f) for f in factors]
    if len(factors) < 2 or 0 in sizes:
        return [tuple(r) for r in product(*factors)]
    # pairs as ((factor i, value index a), (factor j, value index b)) with i < j
    uncovered = {
        ((i, a), (j, b))
        for i, j in combinations(range(len(factors)), 2)
        for a in range(sizes[i])
        for b in range(sizes[j])
    }
    rows: list[tuple[int, ...]] = []
    while uncovered:
        (i, a), (j, b) = min(uncovered)
        row: dict[int, int] = {i: a, j: b}
        for k in range(len(factors)):
            if k in row:
                continue

            row[k] = max(range(sizes[k]), key=lambda v: (_gain(row, k, v, uncovered), -v))
        full = tuple(row[k] for k in range(len(factors)))
        uncovered -= {((p, full[p]), (q, full[q])) for p, q in combinations(range(len(factors)), 2)}
        rows.append(full)
    return [tuple(factors[k][v] for k, v in enumerate(r)) for r in rows]


def _gain(row: dict[int, int], k: int, v: int, uncovered: set) -> int:
    """How many uncovered pairs value ``v`` of factor ``k`` covers with the chosen ``row``."""
    return sum(
        (((m, row[m]), (k, v)) if m < k else ((k, v), (m, row[m]))) in uncovered for m in row
    )
