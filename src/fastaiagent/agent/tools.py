"""Function tools: a Python function the model can call.

The function's signature becomes a pydantic model: its type hints (unions,
``Optional``, ``Literal``, lists, dicts, nested models, dataclasses,
``Annotated[..., Field(...)]``), defaults and docstring parameter descriptions
give the JSON schema the model sees, and the arguments the model sends are
validated (and coerced, e.g. ``"3"`` to ``3``) against it before the function
runs. A parameter annotated with :class:`~fastaiagent.agent.context.RunContext`
receives the run's context and is hidden from the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import json
import re
import types
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastaiagent import _validate as check
from fastaiagent.agent.context import RunContext
from fastaiagent.errors import InvalidTypeError, InvalidValueError, UsageError
from fastaiagent.llm.base import ToolSpec

if TYPE_CHECKING:
    from pydantic import BaseModel

MAX_ERRORS_SHOWN = 5  # validation errors listed in the message sent back to the model


class ToolArgumentsError(InvalidValueError):
    """The model called a tool with arguments that do not match its schema.

    The agent sends the message back to the model as the tool's result, so it
    can call again with corrected arguments; the run continues.
    """


def _is_run_context(annotation: Any) -> bool:
    """``RunContext``, ``RunContext[State]``, a subclass, or any of them ``| None``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(options) == 1 and _is_run_context(options[0])
    target = origin if origin is not None else annotation
    return isinstance(target, type) and issubclass(target, RunContext)


_GOOGLE_ARGS = re.compile(r"^\s*(?:Args|Arguments|Parameters|Params)\s*:\s*$", re.IGNORECASE)
_GOOGLE_ITEM = re.compile(r"^(?P<indent>\s*)(?P<name>\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")
_REST_ITEM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(?P<name>\w+)\s*:\s*(?P<text>.*)$")


def parameter_descriptions(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style ``Args:`` section or reST ``:param x:``."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_args, item_indent = False, -1
    for line in doc.splitlines():
        rest = _REST_ITEM.match(line)
        if rest:
            current = found.setdefault(rest.group("name"), [rest.group("text").strip()])
            in_args = False
            continue
        if _GOOGLE_ARGS.match(line):
            in_args, item_indent, current = True, -1, None
            continue
        if not line.strip():
            current = None if in_args else current
            continue
        indent = len(line) - len(line.lstrip())
        item = _GOOGLE_ITEM.match(line) if in_args else None
        if item and (item_indent < 0 or indent == item_indent):
            item_indent = indent
            current = found.setdefault(item.group("name").lstrip("*"), [item.group("text").strip()])
        elif current is not None and indent > max(item_indent, 0):
            current.append(line.strip())  # continuation of the previous description
        elif in_args and indent <= item_indent:
            in_args, current = False, None  # the section ended
    return {name: " ".join(p for p in parts if p) for name, parts in found.items() if any(parts)}


def _type_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    target = fn.func if isinstance(fn, functools.partial) else fn
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target).__call__  # a callable object: the hints are on its __call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError) as exc:
        raise InvalidTypeError(
            f"cannot read the type hints of tool {name!r} ({exc}); define the types it uses at "
            "module level (forward references to local classes cannot be resolved)"
        ) from exc


def _schema_generator() -> type[Any]:
    from pydantic.json_schema import GenerateJsonSchema

    class ToolSchema(GenerateJsonSchema):
        """Pydantic's schema without the auto-generated titles (tokens the model does not need)."""

        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

        def model_schema(self, schema: Any) -> Any:
            generated = super().model_schema(schema)
            generated.pop("title", None)
            return generated

    return ToolSchema


@dataclass(frozen=True)
class _Signature:
    """What a function's signature gives a tool: argument model, schema, injected names."""

    model: type[BaseModel]
    schema: dict[str, Any]
    context_param: str | None
    positional: tuple[str, ...]  # positional-only parameters, in order


# Building the pydantic model costs ~1 ms; agents built per request reuse it. The
# entry holds nothing that refers to the function, so it goes when the function does.
_SIGNATURES: weakref.WeakKeyDictionary[Any, _Signature] = weakref.WeakKeyDictionary()


def _signature(fn: Callable[..., Any], name: str) -> _Signature:
    try:
        cached = _SIGNATURES.get(fn)
    except TypeError:  # not weak-referenceable or not hashable: build every time
        cached = None
    if cached is None:
        cached = _build_signature(fn, name)
        with contextlib.suppress(TypeError):
            _SIGNATURES[fn] = cached
    return cached


def _build_signature(fn: Callable[..., Any], name: str) -> _Signature:
    from pydantic import ConfigDict, Field, create_model

    docs = parameter_descriptions(inspect.getdoc(fn) or "")
    hints = _type_hints(fn, name)
    fields: dict[str, Any] = {}
    context_param, positional, extra = None, [], "forbid"
    for param in inspect.signature(fn).parameters.values():
        annotation = hints.get(param.name, Any)
        if _is_run_context(annotation):
            context_param = param.name
        elif param.kind is param.VAR_KEYWORD:
            extra = "allow"  # **kwargs: extra arguments are passed through
        elif param.kind is not param.VAR_POSITIONAL:
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(param.name)
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, Field(default, description=docs.get(param.name)))
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)  # type: ignore[typeddict-item]
    try:
        model = create_model(f"{name}_arguments", __config__=config, **fields)
        schema = model.model_json_schema(schema_generator=_schema_generator())
    except Exception as exc:  # pydantic cannot model a type, or it has no JSON form
        raise InvalidTypeError(
            f"tool {name!r}: cannot build its argument schema ({exc}); use str, numbers, "
            "bool, lists, dicts, Literal, dataclasses or pydantic models"
        ) from exc
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    return _Signature(model, schema, context_param, tuple(positional))


class FunctionTool:
    """Wraps a function (sync or async) as a tool.

    The parameter schema comes from the signature's type hints, defaults and
    the docstring's ``Args:`` (or ``:param x:``) descriptions; the first
    docstring paragraph is the tool's description. Arguments the model sends
    are validated before the function runs; invalid ones raise
    :class:`ToolArgumentsError` (which the agent sends back to the model).
    Unknown arguments are refused unless the function takes ``**kwargs``.
    A parameter annotated with ``RunContext`` (whatever its name) receives the
    run's context instead of a model argument.
    """

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> None:
        if not callable(fn):
            raise InvalidTypeError(f"a tool must be callable, got {type(fn).__name__}")
        self.fn = fn
        default_name = getattr(fn, "__name__", None) or type(fn).__name__
        self.name = check.text("tool name", name if name is not None else default_name)
        if description is not None:
            check.text("tool description", description)
        doc = inspect.getdoc(fn) or ""
        self.description = description or doc.split("\n\n")[0].strip() or self.name
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )
        signature = _signature(fn, self.name)
        self._model = signature.model
        self._context_param = signature.context_param
        self._positional = signature.positional
        self.spec = ToolSpec(
            name=self.name, description=self.description, parameters=copy.deepcopy(signature.schema)
        )

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The model's arguments checked and converted to the function's types.

        Raises :class:`ToolArgumentsError` naming each problem.
        """
        from pydantic import ValidationError

        try:
            parsed = self._model.model_validate(arguments if arguments is not None else {})
        except ValidationError as exc:
            raise ToolArgumentsError(self._describe(exc)) from None
        values = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        values.update(parsed.model_extra or {})
        return values

    def _describe(self, exc: Any) -> str:
        problems = []
        for error in exc.errors()[:MAX_ERRORS_SHOWN]:
            where = ".".join(str(p) for p in error["loc"]) or "arguments"
            problems.append(f"{where}: {error['msg']}")
        more = exc.error_count() - len(problems)
        tail = f" (and {more} more)" if more > 0 else ""
        return (
            f"invalid arguments for tool {self.name!r}: {'; '.join(problems)}{tail}. "
            "Call it again with arguments that match its schema."
        )

    def _invoke(self, arguments: Any, context: Any) -> Any:
        values = self.validate(arguments)
        positional = [values.pop(name) for name in self._positional]
        if self._context_param:
            values[self._context_param] = context
        return self.fn(*positional, **values)

    def call(self, arguments: Any, context: Any = None) -> str:
        """Validate ``arguments`` and run the tool; the result is returned to the model as text."""
        if self._is_async:
            raise UsageError(f"tool {self.name!r} is async: call the agent with arun/astream")
        result = self._invoke(arguments, context)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()  # no "never awaited" warning for a coroutine we will not run
            raise UsageError(f"tool {self.name!r} is async: call the agent with arun/astream")
        return _as_text(result)

    async def acall(self, arguments: Any, context: Any = None) -> str:
        """Async :meth:`call`; a sync tool runs in a worker thread."""
        if self._is_async:
            return _as_text(await self._invoke(arguments, context))
        return await asyncio.to_thread(self.call, arguments, context)


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    dump = getattr(result, "model_dump", None)  # a pydantic model returned by the tool
    if callable(dump):
        result = dump(mode="json")
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return str(result)


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Decorator form: ``@tool`` or ``@tool(name=..., description=...)``."""
    if fn is None:
        return lambda f: FunctionTool(f, name=name, description=description)
    return FunctionTool(fn, name=name, description=description)


def as_tool(obj: Any) -> FunctionTool:
    """``obj`` as a :class:`FunctionTool` (a plain callable is wrapped)."""
    return obj if isinstance(obj, FunctionTool) else FunctionTool(obj)


__all__ = ["FunctionTool", "ToolArgumentsError", "as_tool", "parameter_descriptions", "tool"]
