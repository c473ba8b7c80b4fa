"""Adapters that put this library's stores under other agent frameworks.

- :mod:`fastaiagent.integrations.langgraph`: a LangGraph ``BaseStore`` and a
  checkpointer (``pip install 'fastaiagent[langgraph]'``);
- :mod:`fastaiagent.integrations.openai_agents`: an OpenAI Agents SDK
  ``Session`` and a tool that reads a user's durable facts
  (``pip install 'fastaiagent[openai-agents]'``).

Each keeps its state as namespaced items (:mod:`fastaiagent.facts.items`) in
the same SQLite file, Postgres database or Redis server as the facts.
"""
