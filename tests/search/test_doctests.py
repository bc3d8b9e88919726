"""Run the ``>>>`` examples of the search modules."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["jaxpapers.search.muzero", "jaxpapers.search.distributional",
                                  "jaxpapers.search.risk"])
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
