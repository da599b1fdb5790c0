"""What the running interpreter does with threads: the one check placement and the tuner ask.

On a free-threaded CPython (3.13t, 3.14t: built with ``--disable-gil``) whose GIL is off
at run time, threads of Python code run in parallel, so the rules that send GIL-bound work
to processes, or oversubscribe threads to fill cores a held GIL leaves idle, do not apply.
"""

from __future__ import annotations

import sys
import sysconfig


def gil_disabled() -> bool:
    """Whether this interpreter runs Python threads in parallel now: a free-threaded build
    (``Py_GIL_DISABLED``) with the GIL still off (an extension that does not declare itself
    GIL-free turns it back on at import, as does ``PYTHON_GIL=1``).

    Asked at each decision, not cached: the GIL can come back on while the process runs.

    Example:
        >>> import sys
        >>> gil_disabled() == (not getattr(sys, "_is_gil_enabled", lambda: True)())
        True
    """
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is not None and not is_enabled()


FREE_THREADED_REASON = "free-threaded interpreter: threads run in parallel"
"""Why placement keeps work on threads where :func:`gil_disabled`."""
