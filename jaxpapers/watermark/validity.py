"""Line validity: a cheap, parse-only proxy for "the code still looks like Python".

Generated code from a small LM rarely forms a whole parseable function, so quality is measured per
line: the share of complete lines that Python's parser accepts on their own. Nothing is ever
executed or compiled: only :func:`ast.parse` runs (which builds a syntax tree; it neither imports
nor evaluates, and checks such as ``return`` outside a function belong to the compiler, so they do
not apply).
"""

from __future__ import annotations

import ast
import re
import warnings

__all__ = ["line_validity"]

_BODY = "\n    pass"
# headers under which a continuation clause parses: elif/else after an if, except/finally after a
# try, case inside a match
_DUMMY_HEADERS = {
    "elif": "if 0:\n    pass\n",
    "else": "if 0:\n    pass\n",
    "except": "try:\n    pass\n",
    "finally": "try:\n    pass\n",
}
_CLAUSE = re.compile(r"(elif|else|except|finally|case)\b")


def _parses(source: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SyntaxWarning for invalid escapes in strings
        try:
            ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
            return False
    return True


def _line_ok(line: str) -> bool:
    """One dedented non-blank line parses, alone or as the header of a block / clause."""
    s = line.strip()
    if _parses(s) or _parses(s + _BODY):  # a statement, or a block header ending in ':'
        return True
    if s.startswith("try"):  # a try header needs a handler after its body
        return any(_parses(s + body + "\nfinally:" + _BODY) for body in ("", _BODY))
    if s.startswith("@"):  # a decorator line decorates the def that follows it
        return _parses(s + "\ndef _():\n    pass")
    clause = _CLAUSE.match(s)
    if clause is None:
        return False
    word = clause.group(1)
    if word == "case":  # a match-case clause: indented under a dummy `match`
        return any(_parses("match _:\n    " + s + body) for body in ("", "\n        pass"))
    head = _DUMMY_HEADERS[word]
    return _parses(head + s) or _parses(head + s + _BODY)


def line_validity(text: str | bytes) -> tuple[int, int]:
    """Count the complete non-blank lines of ``text`` that parse as Python on their own.

    A line counts when it ends with ``\\n`` (an unfinished last line is ignored) and is not blank.
    It is *valid* when, after stripping its indentation, :func:`ast.parse` accepts it
      * as it is (a statement or a comment),
      * or followed by an indented ``pass`` (a block header ending in ``:``, comment allowed;
        ``try:`` also gets a dummy ``finally: pass``),
      * or, for ``elif``/``else``/``except``/``finally`` (and ``case``) clauses, under a matching
        dummy header (``if 0: pass``, ``try: pass``, ``match _:``), with or without that ``pass``,
      * or, for a decorator line ``@...``, followed by a dummy ``def``.
    Lines of a statement that spans several lines are each invalid on their own. Parsing only:
    nothing is executed. Bytes are decoded as UTF-8 with replacement characters.

    Args:
      text: generated source code (``str`` or UTF-8 ``bytes``).

    Returns:
      ``(valid_lines, total_lines)``; the share is ``valid / total`` when ``total > 0``.

    >>> line_validity("def f(x):\\n    return x +\\n\\n    else:\\n  y = [1, 2")
    (2, 3)
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise ValueError(f"text must be str or bytes, got {type(text).__name__}")
    lines = [ln for ln in text.split("\n")[:-1] if ln.strip()]
    return sum(_line_ok(ln) for ln in lines), len(lines)
