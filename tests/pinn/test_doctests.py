"""Run the ``>>>`` examples of the public PINN modules as doctests."""

import doctest
import importlib

import pytest

MODULES = ["jaxpapers.pinn.operators", "jaxpapers.pinn.networks", "jaxpapers.pinn.problems",
           "jaxpapers.pinn.solvers", "jaxpapers.pinn.diagnostics", "jaxpapers.pinn.training"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0, f"{name} has no doctest examples"
    assert res.failed == 0
