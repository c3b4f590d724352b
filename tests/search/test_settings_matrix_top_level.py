"""The settings matrix (tests/settings_matrix.py), top_level: each key changed from its default on
every strategy that accepts it changes the tiny run's result or is refused in one line before
the first epoch."""

import pytest
import settings_matrix as M


@pytest.mark.parametrize("case", M.cases(M.top_cases()))
def test_applied_or_refused(case):
    M.check(case)


def test_declarations_name_real_keys():
    """Every ``NO_EFFECT`` entry names a key some YAML has (no stale declaration)."""
    every = M.strategy_cases() + M.component_cases() + M.cost_cases() + M.top_cases()
    known = {(c.plugin, c.key) for c in every} | {(c.plugin, c.key.split(".")[0]) for c in every}
    assert set(M.NO_EFFECT) <= known, set(M.NO_EFFECT) - known
