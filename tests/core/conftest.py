"""Fixtures shared by the tests of ``jaxpapers.core``."""

import pathlib
import shutil
import tempfile

import pytest

from jaxpapers.core import sandbox


@pytest.fixture
def work_parent(monkeypatch):
    """A private parent for the sandbox's work (and staging) folders, so each test can check
    that nothing is left behind."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="jaxpapers-sandbox-test-"))
    d.chmod(0o755)  # under /tmp: reachable by uid 65534
    monkeypatch.setattr(sandbox, "WORK_PARENT", str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)
