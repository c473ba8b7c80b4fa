"""Tool schemas and argument validation, and the agent's constructor checks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from fastaiagent import Agent, RunContext
from fastaiagent.agent.middleware import RedactPII
from fastaiagent.agent.tools import FunctionTool, ToolArgumentsError, parameter_descriptions, tool
from fastaiagent.errors import InvalidTypeError, InvalidValueError, UsageError
from fastaiagent.testing import CannedLLM, tool_call


class Address(BaseModel):
    street: str
    zip_code: int | None = None


@dataclass
class Session:
    user_id: str


def book(
    city: str,
    nights: int | str,
    room: Literal["single", "double"] = "single",
    guests: list[str] | None = None,
    extras: dict[str, int] | None = None,
    address: Address | None = None,
    note: Annotated[str, Field(max_length=20)] = "",
) -> str:
    """Book a hotel.

    Longer explanation that is not part of the description.

    Args:
        city: Where to stay,
            as a city name.
        nights (int): How many nights.
        room: The room type.
    """
    return f"{city}/{nights}/{room}/{guests}/{extras}/{address}/{note}"


def schema(fn) -> dict:
    return FunctionTool(fn).spec.parameters


def test_unions_optionals_literals_lists_dicts_and_models_get_real_schemas():
    props = schema(book)["properties"]
    assert props["nights"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert props["room"] == {
        "type": "string",
        "enum": ["single", "double"],
        "default": "single",
        "description": "The room type.",
    }
    assert props["guests"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert props["extras"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["address"]["anyOf"][0] == {"$ref": "#/$defs/Address"}
    assert schema(book)["$defs"]["Address"]["required"] == ["street"]
    assert props["note"]["maxLength"] == 20
    assert schema(book)["required"] == ["city", "nights"]
    assert all(spec != {} for spec in props.values())


def test_docstring_gives_description_and_parameter_descriptions():
    spec = FunctionTool(book).spec
    assert spec.description == "Book a hotel."
    assert spec.parameters["properties"]["city"]["description"] == "Where to stay, as a city name."
    assert spec.parameters["properties"]["nights"]["description"] == "How many nights."
    assert "title" not in spec.parameters and "title" not in spec.parameters["properties"]["city"]


def test_rest_style_parameter_descriptions():
    doc = "Do it.\n\n:param city: The city.\n:param int days: How long.\n:returns: text"
    assert parameter_descriptions(doc) == {"city": "The city.", "days": "How long."}


def test_only_a_run_context_annotation_is_injected_a_context_name_is_not():
    def lookup(context: str, ctx: RunContext, limit: int = 3) -> str:
        return f"{context}:{ctx.state.user_id}:{limit}"

    spec = FunctionTool(lookup).spec.parameters
    assert list(spec["properties"]) == ["context", "limit"]
    assert spec["required"] == ["context"]
    run_context = RunContext(state=Session("alice"))
    assert FunctionTool(lookup).call({"context": "orders"}, run_context) == "orders:alice:3"


def test_parameterised_and_optional_run_context_are_injected():
    def who(session: RunContext[Session] | None) -> str:
        return session.state.user_id if session else "nobody"

    built = FunctionTool(who)
    assert built.spec.parameters["properties"] == {}
    assert built.call({}, RunContext(state=Session("bob"))) == "bob"


def test_arguments_are_validated_and_converted_before_the_function_runs():
    built = FunctionTool(book)
    out = built.call({"city": "Oslo", "nights": 2, "address": {"street": "Main", "zip_code": "123"}})
    assert out == "Oslo/2/single/None/None/street='Main' zip_code=123/"
    with pytest.raises(ToolArgumentsError, match=r"room: Input should be 'single' or 'double'"):
        built.call({"city": "Oslo", "nights": 2, "room": "suite"})
    with pytest.raises(ToolArgumentsError, match=r"city: Field required"):
        built.call({"nights": 2})
    with pytest.raises(ToolArgumentsError, match=r"colour: Extra inputs are not permitted"):
        built.call({"city": "Oslo", "nights": 1, "colour": "red"})


def test_kwargs_tools_accept_extra_arguments():
    def anything(name: str, **rest: int) -> str:
        return f"{name}:{sorted(rest.items())}"

    assert FunctionTool(anything).call({"name": "x", "b": 2, "a": 1}) == "x:[('a', 1), ('b', 2)]"


def test_invalid_arguments_go_back_to_the_model_and_the_run_continues():
    ran: list[int] = []

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(a + b)
        return a + b

    llm = CannedLLM([tool_call("add", a="one", b=2), tool_call("add", a=1, b=2), "3"])
    result = Agent(name="calc", llm=llm, tools=[add]).run("1+2?")
    assert result.output == "3" and result.status == "completed"
    first = result.tool_calls[0]["output"]
    assert first.startswith("error: invalid arguments for tool 'add': a: Input should be a valid integer")
    assert ran == [3]  # the function never ran with the bad arguments
    assert llm.calls[1][-1].role == "tool" and llm.calls[1][-1].content == first


def test_invalid_arguments_in_arun_and_astream_are_tool_errors_too():
    async def add(a: int, b: int) -> int:
        return a + b

    def make() -> Agent:
        return Agent(name="calc", llm=CannedLLM([tool_call("add", a=[1], b=2), "done"]), tools=[add])

    async def main() -> tuple[str, str]:
        ran = await make().arun("go")
        streamed = [event async for event in make().astream("go")][-1]
        return ran.tool_calls[0]["output"], streamed.tool_calls[0]["output"]

    for output in asyncio.run(main()):
        assert output.startswith("error: invalid arguments for tool 'add': a: Input should be a valid integer")


def test_unknown_tool_lists_the_tools():
    llm = CannedLLM([tool_call("nope"), "ok"])
    result = Agent(name="t", llm=llm, tools=[book]).run("go")
    assert result.tool_calls[0]["output"] == "error: unknown tool 'nope'; the tools are: book"


def test_async_tool_in_a_sync_run_is_a_clear_tool_error():
    async def slow() -> str:
        return "x"

    with pytest.raises(UsageError, match="is async: call the agent with arun/astream"):
        FunctionTool(slow).call({})
    result = Agent(name="t", llm=CannedLLM([tool_call("slow"), "ok"]), tools=[slow]).run("go")
    assert "is async" in result.tool_calls[0]["output"]


def test_decorator_callable_object_and_bad_tools():
    @tool(name="greet", description="Say hello.")
    def hello(who: str) -> str:
        return f"hi {who}"

    class Counter:
        def __call__(self, step: int = 1) -> int:
            return step + 1

    assert hello.spec.name == "greet" and hello.call({"who": "x"}) == "hi x"
    counter = FunctionTool(Counter(), name="count")
    assert counter.spec.parameters["properties"] == {"step": {"type": "integer", "default": 1}}
    assert counter.call({"step": "4"}) == "5"
    with pytest.raises(InvalidTypeError, match="a tool must be callable, got int"):
        FunctionTool(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="tool name cannot be empty"):
        FunctionTool(book, name=" ")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_tool_rounds": "3"}, InvalidTypeError, "max_tool_rounds must be an int, got str '3'"),
        ({"max_tool_rounds": 0}, InvalidValueError, "max_tool_rounds must be >= 1, got 0"),
        ({"max_tool_rounds": True}, InvalidTypeError, "max_tool_rounds must be an int, got bool"),
        ({"system_prompt": None}, InvalidTypeError, "system_prompt must be a str, got NoneType"),
        ({"name": 7}, InvalidTypeError, "name must be a str, got int"),
        ({"tools": book}, InvalidTypeError, r"wrap a single tool in a list: tools=\[my_tool\]"),
        ({"tools": "book"}, InvalidTypeError, "tools must be a list of functions or FunctionTool"),
        ({"tools": [book, book]}, InvalidValueError, "two tools are named 'book'"),
        ({"tools": [42]}, InvalidTypeError, "a tool must be callable, got int"),
        ({"middleware": RedactPII()}, InvalidTypeError, r"middleware=\[RedactPII\(\)\]"),
        ({"middleware": [object()]}, InvalidTypeError, "middleware items must be Middleware"),
    ],
)
def test_agent_arguments_are_checked_at_construction(kwargs, error, match):
    arguments = {"name": "a", "llm": CannedLLM("x"), **kwargs}
    with pytest.raises(error, match=match):
        Agent(**arguments)


def test_resume_and_fork_need_a_result():
    agent = Agent(name="a", llm=CannedLLM("x"))
    with pytest.raises(InvalidTypeError, match="resume needs the AgentResult of a run, got str"):
        agent.resume("not a result")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="fork needs the AgentResult of a run, got dict"):
        agent.fork({}, "q")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="query must be a str, got int"):
        agent.run(5)  # type: ignore[arg-type]


def test_redact_pii_flags_must_be_booleans():
    with pytest.raises(InvalidTypeError, match="redact_input must be True or False, got str 'yes'"):
        RedactPII(redact_input="yes")  # type: ignore[arg-type]


def test_partials_positional_only_and_rebuilt_tools():
    import functools

    def scale(value: int, /, factor: int = 2) -> int:
        return value * factor

    assert FunctionTool(scale).call({"value": "3"}) == "6"
    triple = FunctionTool(functools.partial(scale, factor=3), name="triple")
    assert triple.call({"value": 2}) == "6"
    first, second = FunctionTool(book), FunctionTool(book, name="reserve")
    first.spec.parameters["properties"].clear()  # a caller editing one spec...
    assert "city" in second.spec.parameters["properties"]  # ...does not change another's
    assert FunctionTool(book).spec.parameters == schema(book)
