"""Function tools: a Python function the model can call, schema from its type hints."""

from __future__ import annotations

import asyncio
import inspect
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from fastaiagent.errors import InvalidTypeError
from fastaiagent.llm.base import ToolSpec

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
}


def _json_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_schema(options[0]) if len(options) == 1 else {}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin in (list, tuple, set):
        args = typing.get_args(annotation)
        return {"type": "array", "items": _json_schema(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


class FunctionTool:
    """Wraps a function (sync or async) as a tool.

    The parameter schema comes from the signature's type hints; the first
    docstring paragraph is the description. A parameter annotated with
    ``RunContext`` (or named ``context``) receives the run's context instead
    of a model argument.
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None):
        if not callable(fn):
            raise InvalidTypeError("a tool must be callable")
        self.fn = fn
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        self.description = description or doc.split("\n\n")[0].strip() or self.name
        hints = typing.get_type_hints(fn)
        from fastaiagent.agent.context import RunContext

        self._context_param: str | None = None
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in inspect.signature(fn).parameters.values():
            annotation = hints.get(param.name, Any)
            if param.name == "context" or typing.get_origin(annotation) is RunContext or annotation is RunContext:
                self._context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            properties[param.name] = _json_schema(annotation)
            if param.default is param.empty:
                required.append(param.name)
        self.spec = ToolSpec(
            name=self.name,
            description=self.description,
            parameters={"type": "object", "properties": properties, "required": required},
        )

    def _arguments(self, arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        kwargs = dict(arguments)
        if self._context_param:
            kwargs[self._context_param] = context
        return kwargs

    def call(self, arguments: dict[str, Any], context: Any = None) -> str:
        """Run the tool; the result is returned to the model as text."""
        result = self.fn(**self._arguments(arguments, context))
        if inspect.isawaitable(result):
            raise InvalidTypeError(f"tool {self.name!r} is async: use arun/astream")
        return _as_text(result)

    async def acall(self, arguments: dict[str, Any], context: Any = None) -> str:
        if inspect.iscoroutinefunction(self.fn):
            return _as_text(await self.fn(**self._arguments(arguments, context)))
        return await asyncio.to_thread(self.call, arguments, context)


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return str(result)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Decorator form: ``@tool`` or ``@tool(name=..., description=...)``."""
    if fn is None:
        return lambda f: FunctionTool(f, name=name, description=description)
    return FunctionTool(fn, name=name, description=description)


def as_tool(obj: Any) -> FunctionTool:
    return obj if isinstance(obj, FunctionTool) else FunctionTool(obj)
