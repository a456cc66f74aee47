"""Python source parsed into a tree, one thread at a time.

CPython 3.11 counts the depth of the tree `ast.parse` builds in one counter shared by the whole
interpreter. When a thread switches in the middle of a parse (a finalizer run by the garbage collector
may sleep or wait), another thread's parse moves that counter and the first one raises
`SystemError: AST constructor recursion depth mismatch` (python/cpython#106905, still seen on 3.11.7).
Rollouts grade in threads, and each grade parses the hidden tests, so every parse goes through here.
"""

import ast
import threading

_PARSING = threading.RLock()  # re-entrant: a finalizer run inside a parse may parse too


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` with no other thread's parse interleaved."""
    with _PARSING:
        return ast.parse(source, filename=filename)
