"""An OpenAI Agents SDK agent whose conversation and user facts live in fastaiagent.

FastAIAgentSession keeps the conversation (the SDK's Session protocol); the
agent's instructions carry the user's durable facts (user_facts_instructions)
and it can store new ones with a tool (user_facts_tools). Every turn below
runs in a new process, as after a restart.

Run it:
    python chat_session.py                       # a demo: three turns, three processes
    python chat_session.py LOCATION SESSION USER MESSAGE
        LOCATION: sqlite:///memory.db, postgresql://..., redis://...

No network: LocalModel implements the SDK's Model interface with canned rules
(a real agent would use an OpenAI model here).
Install: pip install 'fastaiagent[openai-agents]'
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from agents.tracing import set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from fastaiagent import Memory
from fastaiagent.integrations.openai_agents import (
    FastAIAgentSession,
    user_facts_instructions,
    user_facts_tools,
)


def _say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(text=text, type="output_text", annotations=[])]
    return ResponseOutputMessage(id="msg", content=content, role="assistant", status="completed", type="message")


class LocalModel(Model):
    """Canned rules instead of an LLM: "remember ..." calls the remember tool;
    anything else is answered with how many user turns the model was shown and
    the facts its instructions carry."""

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any, **kw: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        if items[-1].get("type") == "function_call_output":
            output: Any = _say(f"Done. {items[-1]['output']}")
        else:
            said = str(items[-1].get("content", ""))
            if said.lower().startswith("remember "):
                arguments = json.dumps({"fact": said[len("remember ") :]})
                output = ResponseFunctionToolCall(
                    arguments=arguments, call_id=f"call-{len(items)}", name="remember_user_fact", type="function_call"
                )
            else:
                turns = sum(1 for item in items if item.get("role") == "user")
                marker = "What you know about this user:"
                known = system_instructions or ""
                facts = known.split(marker)[-1].strip() if marker in known else ""
                output = _say(f"You have said {turns} things to me. Facts: {facts or 'none'}")
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


async def one_turn(location: str, session_id: str, user: str, message: str) -> str:
    memory = Memory(location=location)
    agent = Agent(
        name="assistant",
        instructions=user_facts_instructions(memory, "You are a helpful assistant."),
        tools=user_facts_tools(memory),
        model=LocalModel(),
    )
    session = FastAIAgentSession(session_id, location)
    result = await Runner.run(agent, message, session=session, context={"user_id": user}, run_config=RunConfig())
    return str(result.final_output)


def demo() -> None:
    location = f"sqlite:///{tempfile.mkdtemp()}/memory.db"
    turns = [
        ("chat-1", "remember I am allergic to peanuts"),
        ("chat-1", "what should I eat?"),  # a new process: the session's items are back
        ("chat-2", "hello"),  # a new session: the user's facts carry over
    ]
    for session_id, message in turns:
        reply = subprocess.run(
            [sys.executable, __file__, location, session_id, "bob", message],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        print(f"[{session_id}] bob: {message}\n[{session_id}] agent: {reply}")


if __name__ == "__main__":
    set_tracing_disabled(True)  # no trace upload: this example is offline
    if len(sys.argv) == 5:
        print(asyncio.run(one_turn(*sys.argv[1:])))
    else:
        demo()
