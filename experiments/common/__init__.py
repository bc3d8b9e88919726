"""Pieces several experiments share (not a paper; nothing under ``jaxpapers/`` imports it)."""
