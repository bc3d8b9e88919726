"""DIVE's offline tool worlds: five domains of typed, pure tools over seeded worlds."""

from jaxpapers.benchmarks.dive.worlds._core import (DOMAINS, FLOAT_DIGITS, Tool, ToolError,
                                                    ToolSpec, World, arg, call_tool, canonical,
                                                    domain_tools, dumps, make_world, registry,
                                                    tool)

__all__ = ["DOMAINS", "FLOAT_DIGITS", "Tool", "ToolError", "ToolSpec", "World", "arg",
           "call_tool", "canonical", "domain_tools", "dumps", "make_world", "registry", "tool"]
