"""line_validity on hand-written code: statements, headers, clauses, blanks, unfinished lines."""

from __future__ import annotations

import pytest

from jaxpapers import watermark as wm


@pytest.mark.parametrize("line, valid", [
    ("x = 1", True),
    ("        return x + y", True),                 # indentation is stripped
    ("return", True),                               # parser only: no 'outside function' check
    ("yield from g()", True),
    ("# just a comment", True),
    ("import os.path as p", True),
    ("def f(a, b=2, *args, **kw):", True),         # header: parsed with an indented pass
    ("class A(B, metaclass=M):  # comment", True),  # header with a trailing comment
    ("for i in range(10):", True),
    ("if x: return y", True),                       # header with its body on the line
    ("with open(p) as fh, lock:", True),
    ("async def main():", True),
    ("elif a < b:", True),                          # clauses under a dummy header
    ("else:", True),
    ("    else: return 3", True),
    ("except ValueError as e:", True),
    ("except:", True),
    ("finally:", True),
    ("case [x, y]:", True),                         # match clause
    ("case _: pass", True),
    ("try:", True),                                 # with a dummy body and finally
    ("try: x = 1", True),
    ("@functools.lru_cache(maxsize=None)", True),   # decorator of the next def
    ("x = (1 +", False),                            # first line of a multi-line statement
    ("    1, 2)", False),                           # its continuation
    ("def f(:", False),
    ("else if x:", False),
    ("x = = 2", False),
    ("foo(a b)", False),
    ("except ValueError", False),                   # clause without its colon
    ("@", False),
    ("print('unterminated)", False),
    ("elsewhere = 1", True),                        # not a clause: a plain statement
    ("x = 'caf\u00e9 \\d'", True),                  # non-ASCII, invalid escape (a warning only)
])
def test_single_lines(line, valid):
    assert wm.line_validity(line + "\n") == (int(valid), 1)


def test_blank_and_unfinished_lines_are_ignored():
    text = "def f(x):\n\n   \n    y = x +\n    return y\n\t\nprint(f(1)"
    # counted: 'def f(x):' (valid), 'y = x +' (invalid), 'return y' (valid); the blank and
    # whitespace-only lines and the unterminated last line are not counted
    assert wm.line_validity(text) == (2, 3)
    assert wm.line_validity("") == (0, 0)
    assert wm.line_validity("x = 1") == (0, 0)        # no newline: incomplete
    assert wm.line_validity("\n\n  \n") == (0, 0)


def test_a_whole_function():
    code = (
        "def mean(xs):\n"
        "    '''Average of xs.'''\n"
        "    if not xs:\n"
        "        raise ValueError('empty')\n"
        "    try:\n"
        "        total = sum(xs)\n"
        "    except TypeError:\n"
        "        return None\n"
        "    else:\n"
        "        return total / len(xs\n"          # a broken line
        "    finally:\n"
        "        pass\n")
    assert wm.line_validity(code) == (11, 12)
    assert wm.line_validity(code.encode()) == (11, 12)  # bytes are decoded as UTF-8
    # invalid UTF-8 bytes become replacement characters (invalid outside strings)
    assert wm.line_validity(b"x = 1\n\xff\xfe = 2\ny = '\xff'\n") == (2, 3)


def test_never_executes():
    # a line that would have an effect if executed is only parsed
    text = "raise SystemExit(3)\nimport this_module_does_not_exist\n"
    assert wm.line_validity(text) == (2, 2)


def test_bad_input():
    with pytest.raises(ValueError, match="text"):
        wm.line_validity(3)
