"""``repr(dataset)``: the pipeline as the calls that build it, with their key arguments."""

from __future__ import annotations

import inspect
import re
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.functions import function_name
from feedline.core.registry import operation

# Node classes whose operation is not their class name in snake case (the method or source
# a user calls).
_OPERATIONS = {
    "TensorSlicesDataset": "from_tensor_slices",
    "TensorsDataset": "from_tensors",
    "GeneratorDataset": "from_generator",
    "ListDataset": "from_list",
    "SampleFromDatasetsDataset": "sample_from_datasets",
    "ChooseFromDatasetsDataset": "choose_from_datasets",
    "MapAndBatchDataset": "map_and_batch",
    "OptionsDataset": "with_options",
}
# Arguments never shown: the inputs (shown as the chain) and the stage's own label.
_HIDDEN = frozenset({"self", "input_dataset", "name", "first", "second", "datasets"})
_MAX_ARGUMENT = 48  # characters of one argument's text
_MAX_TEXT = 2000  # characters of the whole text


def operation_name(node: Dataset) -> str:
    """The operation a node runs, as the user called it (``BatchDataset`` -> ``batch``).

    Example:
        >>> import feedline as fl
        >>> operation_name(fl.Dataset.range(3).padded_batch(2))
        'padded_batch'
    """
    cls = type(node).__name__
    if cls in _OPERATIONS:
        return _OPERATIONS[cls]
    base = cls.removesuffix("Dataset") or cls
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


def _value_text(value: Any) -> str:
    if isinstance(value, Dataset):
        return describe_pipeline(value)
    if callable(value) and not isinstance(value, type):
        # The bare name: a qualified one repeats the enclosing function for every lambda.
        return getattr(value, "__name__", None) or function_name(value)
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype.name})"
    if isinstance(value, tuple | list):
        inner = ", ".join(_value_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) \
            else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, np.dtype) or type(value).__module__.startswith("numpy.dtypes"):
        return repr(np.dtype(value).name)
    return repr(value)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_ARGUMENT else text[:_MAX_ARGUMENT - 3] + "..."


def _is_default(value: Any, default: Any) -> bool:
    if default is inspect.Parameter.empty:
        return False
    if isinstance(value, bool | int | float | str | type(None)):
        return type(value) is type(default) and value == default
    return value is default


def _arguments(node: Dataset) -> list[str]:
    """The arguments worth showing: those the node keeps under its parameter's name, other
    than its inputs, its label and their defaults."""
    if isinstance(getattr(node, "range", None), range):  # range(): start, stop, step
        bounds = node.range  # type: ignore[attr-defined]
        return [str(bounds.start), str(bounds.stop)] + (
            [str(bounds.step)] if bounds.step != 1 else [])
    try:
        parameters = inspect.signature(type(node).__init__).parameters
    except (TypeError, ValueError):
        return []
    shown = []
    positional = True  # required arguments need no name while every one before is shown
    for name, parameter in parameters.items():
        if name in _HIDDEN or parameter.kind in (parameter.VAR_POSITIONAL,
                                                  parameter.VAR_KEYWORD):
            continue
        value = getattr(node, name, inspect.Parameter.empty)
        if name == "structure" and value is inspect.Parameter.empty:
            value = getattr(node, "element", value)  # from_tensors keeps its one element
        if (value is inspect.Parameter.empty or value is None
                or _is_default(value, parameter.default)
                or getattr(value, "__self__", None) is node  # a method, not an argument
                or (isinstance(value, Dataset) and name != "structure")):
            positional = False
            continue
        text = _value_text(value) if name == "structure" else _short(_value_text(value))
        required = parameter.default is inspect.Parameter.empty
        shown.append(text if positional and required else f"{name}={text}")
    return shown


def describe_pipeline(dataset: Dataset) -> str:
    """The pipeline ending at ``dataset`` as the chain of calls that builds it.

    A stage with one input is a method call on its input's text; a stage with several (zip,
    concatenate, sample_from_datasets) shows them as its arguments. Functions appear by
    name, arrays by shape and dtype.

    Example:
        >>> import feedline as fl
        >>> describe_pipeline(fl.Dataset.range(10).map(abs, num_parallel_calls=4).batch(2))
        'range(0, 10).map(abs, num_parallel_calls=4).batch(2)'
    """
    inputs = dataset._inputs
    operation = operation_name(dataset)
    arguments = _arguments(dataset)
    if len(inputs) == 1 and not hasattr(dataset, "structure"):
        return f"{describe_pipeline(inputs[0])}.{operation}({', '.join(arguments)})"
    if len(inputs) > 1 and not hasattr(dataset, "structure"):
        arguments = [describe_pipeline(d) for d in inputs] + arguments
    return f"{operation}({', '.join(arguments)})"


@operation("__repr__")
def pipeline_repr(dataset: Dataset) -> str:
    """``repr(dataset)``: ``<feedline.Dataset ...pipeline...>``, cut at 2000 characters.

    Example:
        >>> import feedline as fl
        >>> fl.Dataset.range(3).shuffle(3, seed=1)
        <feedline.Dataset range(0, 3).shuffle(3, seed=1)>
    """
    try:
        text = describe_pipeline(dataset)
    except RecursionError:  # a pipeline deeper than Python's stack: its last stage only
        text = f"...{operation_name(dataset)}(...)"
    if len(text) > _MAX_TEXT:
        text = "..." + text[-(_MAX_TEXT - 3):]
    return f"<feedline.Dataset {text}>"
