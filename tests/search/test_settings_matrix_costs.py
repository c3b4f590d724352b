"""The settings matrix (tests/settings_matrix.py), costs: each key changed from its default on
every strategy that accepts it changes the tiny run's result or is refused in one line before
the first epoch."""

import pytest
import settings_matrix as M


@pytest.mark.parametrize("case", M.cases(M.cost_cases()))
def test_applied_or_refused(case):
    M.check(case)
