"""How many bytes an object holds, for tests that pin what vkpy keeps per pod or node.

tracemalloc counts what was allocated where; a test about one structure wants what is
reachable from it now. This walks the references (gc.get_referents) and adds up
sys.getsizeof, leaving out what is shared by everything (classes, modules, functions).
"""

from __future__ import annotations

import gc
import sys
import types

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def retained_bytes(root: object) -> int:
    """Bytes of every object reachable from `root` (not classes, modules, functions)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total
