"""Reproducible per-case seeds: ``zlib.crc32`` of the case name, never Python's built-in string
hash (salted per process, so a failure seen once could not be reproduced)."""

from __future__ import annotations

import zlib


def seed_for(name: str) -> int:
    """A stable seed in [0, 2^31) for the case called ``name``."""
    return zlib.crc32(name.encode()) % (1 << 31)
