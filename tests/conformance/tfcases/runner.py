"""Run one :class:`~tfcases.harness.Case` in a namespace and return its JSON-safe result.

The same function runs under TensorFlow (recording) and feedline (testing); only the
namespace differs: how to iterate, how to name an error's category, how to checkpoint.

Example:
    >>> from tfcases import ns_fl
    >>> from tfcases.harness import Case
    >>> run_case(Case("t", lambda ns: ns.Dataset.range(2)), ns_fl.NS)
    {'elements': [{'t': 'int64', 's': [], 'v': 0}, {'t': 'int64', 's': [], 'v': 1}], 'error': None}
"""

from __future__ import annotations

from typing import Any

from tfcases.harness import MAX_ELEMENTS, Case, encode, to_numpy


def run_case(case: Case, ns: Any) -> dict[str, Any]:
    """The result of ``case`` built with ``ns``: elements and the error ending them, or a value."""
    if case.mode == "value":
        try:
            value = case.build(ns)
            value = to_numpy(value, ns.is_dataset, ns.read_all)
        except AssertionError:
            raise
        except Exception as error:  # noqa: BLE001 - the category is the result
            return {"error": ns.category(error)}
        if case.derive is not None:
            value = case.derive(value)
        return {"value": encode(value)}

    if case.mode == "resume":
        return {"sequence": _resume(case, ns)}

    elements: list[Any] = []
    error = None
    try:
        dataset = case.build(ns)
        if case.mode.startswith("checkpoint_"):
            source = ns.checkpointed(dataset, case.mode.removeprefix("checkpoint_"))
        else:
            source = ns.iterate(dataset)
        for element in source:
            elements.append(to_numpy(element, ns.is_dataset, ns.read_all))
            if len(elements) > MAX_ELEMENTS:
                raise AssertionError(f"{case.name}: more than {MAX_ELEMENTS} elements")
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the category is the result
        error = ns.category(exc)
    if getattr(case.derive, "needs_uninterrupted", False):
        # A pipeline that failed has no uninterrupted run to compare with: its error is the
        # result.
        uninterrupted = elements if error is not None else [
            to_numpy(e, ns.is_dataset, ns.read_all) for e in ns.iterate(case.build(ns))]
        return {"derived": encode(case.derive(elements, uninterrupted)), "error": error}
    if case.derive is not None:
        return {"derived": encode(case.derive(elements)), "error": error}
    return {"elements": [encode(e) for e in elements], "error": error}


def _resume(case: Case, ns: Any) -> list[Any]:
    """Elements and errors in order, asking for the next element after each error (tf.data
    goes on after an error in a user function: the failed element is dropped)."""
    out: list[Any] = []
    errors = 0
    try:
        iterator = ns.open(case.build(ns))
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the category is the result
        return ["error:" + ns.category(exc)]
    try:
        while len(out) <= MAX_ELEMENTS:
            try:
                element = next(iterator)
            except StopIteration:
                break
            except AssertionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the category is the result
                out.append("error:" + ns.category(exc))
                errors += 1
                if errors >= 20:  # an error that repeats for ever
                    break
                continue
            out.append(encode(to_numpy(element, ns.is_dataset, ns.read_all)))
    finally:
        ns.close(iterator)
    return [encode(x) if isinstance(x, str) else x for x in out]
