"""Pickling user functions for worker processes, keeping where their code is written.

cloudpickle sends the functions of a script (``__main__``), lambdas and closures by value, but
writes ``"<dynamic-code>"`` as their code's file name (so that its bytes do not depend on
where the code is), and a worker's traceback then names no file of the user's. Here code
objects travel as ``marshal`` writes them instead, file name and line table included; the
workers run the interpreter that pickled them, which is what ``marshal`` needs.
"""

from __future__ import annotations

import collections
import io
import marshal
import types
from collections.abc import Callable
from typing import Any, ClassVar

import cloudpickle


def _reduce_code(code: types.CodeType) -> tuple[Any, ...]:
    try:
        return marshal.loads, (marshal.dumps(code),)
    except ValueError:
        # A constant marshal cannot write (a code object rebuilt with ``replace`` around an
        # arbitrary object): cloudpickle's own reduction, so that whatever cloudpickle sent
        # still goes, only without the file name.
        return _CLOUDPICKLE_REDUCE_CODE(code)


_CLOUDPICKLE_REDUCE_CODE = cloudpickle.Pickler.dispatch_table[types.CodeType]


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler with code objects reduced by ``marshal``."""

    dispatch_table: ClassVar[collections.ChainMap[Any, Any]] = collections.ChainMap(
        {types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(value: Any, protocol: int = 5,
          buffer_callback: Callable[[Any], Any] | None = None) -> bytes:
    """``cloudpickle.dumps(value, protocol, buffer_callback)``, except that functions sent
    by value keep their code's file name, so a worker's traceback names the user's file
    (``pickle.loads`` reads it back).

    Example:
        >>> import pickle
        >>> namespace = {"__name__": "__main__"}
        >>> exec(compile("def f(x):\\n    return x + 1\\n", "/work/user.py", "exec"), namespace)
        >>> g = pickle.loads(dumps(namespace["f"]))
        >>> g(1), g.__code__.co_filename
        (2, '/work/user.py')
    """
    file = io.BytesIO()
    _Pickler(file, protocol=protocol, buffer_callback=buffer_callback).dump(value)
    return file.getvalue()


__all__ = ["dumps"]
