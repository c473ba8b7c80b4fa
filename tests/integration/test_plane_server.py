"""The self-hosted plane on loopback, and PlaneFactBlock / Memory reading from it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

import fastaiagent as fa
from _env import POSTGRES_URL, REDIS_URL, missing, unique_name
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks import PlaneFactBlock
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.plane.server import (
    FACTS_PATH,
    EmbeddingRanker,
    FactRequest,
    create_plane_app,
    keyword_ranker,
    select_facts,
    start_plane,
)
from fastaiagent.testing import CannedLLM

KEY = "plane-test-key"


def add(store, text, agent="support", *, confidence=1.0, category=None, project_id=""):
    metadata = {"category": category} if category else {}
    return store.add(
        Fact(text, scope="agent", scope_id=agent, project_id=project_id, confidence=confidence,
             metadata=metadata)
    )


@pytest.fixture
def store(tmp_path):
    facts = MemoryStore(tmp_path / "plane.db")
    add(facts, "Refunds are accepted within 30 days", confidence=0.9, category="policy")
    add(facts, "Support is open 9 to 5 on weekdays", confidence=0.5, category="hours")
    add(facts, "Orders ship from Lyon", confidence=0.7, category="shipping")
    add(facts, "Refund requests need the order number", confidence=0.6, category="policy")
    add(facts, "Internal: the other agent's secret", agent="other-agent")
    add(facts, "Tenant B runs its own refund policy", project_id="tenant-b")
    old = add(facts, "Shipping is free above 20 EUR", category="shipping")
    new = add(facts, "Shipping is free above 50 EUR", confidence=0.8, category="shipping")
    facts.supersede(old, new)
    yield facts
    facts.close()


@pytest.fixture
def served(store):
    running = start_plane(store, KEY)
    yield running
    running.stop()


@pytest.fixture
def connected(served):
    fa.connect(api_key=KEY, target=served.url, timeout=3)
    yield served
    fa.disconnect()


HTTP = httpx.Client(timeout=5, trust_env=False)


def get(served, key=KEY, header="bearer", **params):
    headers = {}
    if key is not None:
        headers = {"Authorization": f"Bearer {key}"} if header == "bearer" else {"X-API-Key": key}
    return HTTP.get(served.url + FACTS_PATH, params={"agent_id": "support", **params},
                    headers=headers)


def fact_texts(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [f["fact"] for f in response.json()["facts"]]


# -- the endpoint ---------------------------------------------------------------------------


def test_api_key_is_required(served):
    assert get(served, key=None).status_code == 401
    assert get(served, key="wrong").status_code == 403
    assert get(served, header="bearer").status_code == 200
    assert get(served, header="x-api-key").status_code == 200


def test_without_a_question_facts_come_most_important_first(served):
    body = get(served).json()
    assert body["agent_id"] == "support"
    assert [f["fact"] for f in body["facts"]] == [
        "Refunds are accepted within 30 days",
        "Shipping is free above 50 EUR",  # the superseded version is never served
        "Orders ship from Lyon",
        "Refund requests need the order number",
        "Support is open 9 to 5 on weekdays",
    ]
    first = body["facts"][0]
    assert set(first) == {"id", "fact", "category", "importance", "score"}
    assert (first["category"], first["importance"], first["score"]) == ("policy", 0.9, None)


def test_only_the_named_agent_and_project_are_served(served, store):
    everything = " ".join(fact_texts(get(served)))
    assert "secret" not in everything and "Tenant B" not in everything
    assert fact_texts(get(served, agent_id="other-agent")) == ["Internal: the other agent's secret"]
    assert fact_texts(get(served, agent_id="nobody")) == []
    assert get(served, agent_id="*").status_code == 400
    assert get(served, agent_id="").status_code == 422
    tenant = start_plane(store, KEY, project_id="tenant-b")
    try:
        assert fact_texts(get(tenant)) == ["Tenant B runs its own refund policy"]
    finally:
        tenant.stop()


def test_expired_facts_are_never_served(served, store):
    import time

    now = time.time()
    store.add(Fact("Winter sale: 20% off", scope="agent", scope_id="support",
                   created_at=now - 60, valid_to=now - 1))
    store.add(Fact("Spring sale: 10% off", scope="agent", scope_id="support",
                   created_at=now - 60, valid_to=now + 3600))
    served_now = fact_texts(get(served))
    assert "Spring sale: 10% off" in served_now and "Winter sale: 20% off" not in served_now
    assert "Winter sale: 20% off" not in fact_texts(get(served, query="sale"))


def test_category_filter_and_max_bound(served):
    assert fact_texts(get(served, category="policy")) == [
        "Refunds are accepted within 30 days",
        "Refund requests need the order number",
    ]
    assert len(fact_texts(get(served, max=2))) == 2
    assert get(served, max=0).status_code == 422
    assert get(served, max=201).status_code == 422
    assert get(served, score_threshold=2).status_code == 422


def test_a_question_ranks_by_relevance_and_threshold(served):
    body = get(served, query="How do refunds work with my order number?").json()
    ranked = [(f["fact"], f["score"]) for f in body["facts"]]
    assert ranked[0][0] == "Refund requests need the order number"
    assert all(score is not None for _, score in ranked)
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    strict = fact_texts(get(served, query="order number refunds", score_threshold=0.6))
    assert strict == ["Refund requests need the order number"]


def test_keyword_ranker_and_a_pluggable_embedding_ranker(store):
    assert keyword_ranker("ship Lyon", ["Orders ship from Lyon", "nothing"]) == [1.0, 0.0]
    assert keyword_ranker("the a of", ["anything"]) == [0.0]

    class LetterEmbedder:  # a tiny deterministic embedder: letter counts
        calls = 0

        def embed(self, texts):
            LetterEmbedder.calls += len(texts)
            return [[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]

    ranker = EmbeddingRanker(LetterEmbedder())
    first = select_facts(store, "support", FactRequest(query="Lyon ships orders"), ranker=ranker)
    assert first[0].fact == "Orders ship from Lyon"
    calls = LetterEmbedder.calls
    select_facts(store, "support", FactRequest(query="Lyon ships orders"), ranker=ranker)
    assert LetterEmbedder.calls == calls + 1  # facts are cached; only the question is embedded
    unranked = select_facts(store, "support", FactRequest(query="Lyon"), ranker=None)
    assert unranked[0].fact == "Refunds are accepted within 30 days"


def test_a_fact_request_is_checked_when_made():
    assert FactRequest() == FactRequest(None, 50, None, 0.0)
    for bad, error in (
        ({"max_facts": 0}, ValueError),
        ({"max_facts": 201}, ValueError),
        ({"score_threshold": 1.5}, ValueError),
        ({"category": 3}, TypeError),
    ):
        with pytest.raises(error):
            FactRequest(**bad)


def test_a_ranker_must_score_every_fact(store):
    with pytest.raises(ValueError, match="scored"):
        select_facts(store, "support", FactRequest(query="q"), ranker=lambda q, texts: [1.0])


def test_the_plane_refuses_to_start_without_a_key(store):
    with pytest.raises(ValueError, match="API key"):
        create_plane_app(store, "")


def server_store(kind: str):
    """A Postgres or Redis store on the local server, isolated by a unique table/prefix."""
    name = unique_name("plane")
    try:
        if kind == "postgres":
            from fastaiagent.learn import PostgresFactStore

            store = PostgresFactStore(POSTGRES_URL, table=name)
        else:
            from fastaiagent.learn import RedisFactStore

            store = RedisFactStore(REDIS_URL, prefix=name)
        store.list_active("agent", "probe")
    except Exception as exc:
        missing(f"{kind} is not reachable: {exc}")
    return store


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_the_plane_serves_any_fact_store(kind):
    store = server_store(kind)
    try:
        add(store, "Served from a server store", agent="srv", confidence=0.4)
        add(store, "Most important", agent="srv", confidence=0.95, category="top")
        add(store, "Someone else's", agent="srv-other")
        with start_plane(store, KEY) as running:
            assert fact_texts(get(running, agent_id="srv")) == [
                "Most important",
                "Served from a server store",
            ]
            assert fact_texts(get(running, agent_id="srv", category="top")) == ["Most important"]
    finally:
        store.destroy()
        store.close()


# -- the block and Memory reading it ------------------------------------------------------------


def test_block_injects_the_planes_facts_into_the_prompt(connected):
    llm = CannedLLM("30 days.")
    memory = ComposableMemory(blocks=[PlaneFactBlock("support", category="policy")])
    agent = fa.Agent("support", llm, system_prompt="Be brief.", memory=memory)
    assert agent.run("How long do refunds take?").output == "30 days."
    prompt = [m.content for m in llm.calls[0]]
    assert prompt[0] == "Be brief."
    assert prompt[1].startswith("Curated facts:\n")  # then the notes preamble, quoted facts
    assert "Refunds are accepted within 30 days" in prompt[1]
    assert "Lyon" not in prompt[1]  # another category


def test_block_with_a_key_the_plane_refuses_injects_nothing(served):
    fa.connect(api_key="not-the-key", target=served.url, timeout=3)
    try:
        llm = CannedLLM("ok")
        agent = fa.Agent("a", llm, memory=ComposableMemory(blocks=[PlaneFactBlock("support")]))
        assert agent.run("refunds?").output == "ok"
        assert not any("Curated facts" in (m.content or "") for m in llm.calls[0])
    finally:
        fa.disconnect()


def test_memory_plane_agent_id_serves_every_user_and_unresolved_callers(connected, tmp_path):
    llm = CannedLLM("noted")
    memory = fa.Memory(
        location=f"sqlite:///{tmp_path / 'local.db'}",
        user_id=lambda ctx: ctx.state.get("user") if ctx is not None else None,
        plane_agent_id="support",
    )
    agent = fa.Agent("support", llm, memory=memory)
    agent.run("refunds?", context=fa.RunContext(state={"user": "alice"}))
    agent.run("shipping?", context=fa.RunContext(state={"user": "bob"}))
    agent.run("hours?", context=fa.RunContext(state={}))  # the resolver returns None
    agent.run("anything?")  # no context at all
    assert len(llm.calls) == 4
    for call in llm.calls:
        injected = [m.content for m in call if (m.content or "").startswith("Curated facts:")]
        assert len(injected) == 1, [m.content for m in call]
    # Each user keeps their own window: bob's prompt never shows alice's turn.
    assert not any(m.content == "refunds?" for m in llm.calls[1])


def test_an_explicit_connection_needs_no_connect_and_two_planes_serve_side_by_side(
    served, tmp_path
):
    other_store = MemoryStore(tmp_path / "other.db")
    add(other_store, "The other plane says hello")
    other = start_plane(other_store, "other-key")
    try:
        assert fa.plane.connection() is None  # nothing process-wide
        here = fa.plane.plane_connection(api_key=KEY, target=served.url, timeout=3)
        there = fa.plane.PlaneConnection(target=other.url + "/", api_key=" other-key ")
        assert (there.target, there.api_key) == (other.url, "other-key")
        texts = {
            name: [f.fact for f in PlaneFactBlock("support", plane=conn).facts("")]
            for name, conn in (("here", here), ("there", there))
        }
        assert "Orders ship from Lyon" in texts["here"]
        assert texts["there"] == ["The other plane says hello"]
        llm = CannedLLM("noted")
        memory = fa.Memory(
            location=f"sqlite:///{tmp_path / 'local.db'}", plane_agent_id="support", plane=there
        )
        assert memory.config.plane is there
        fa.Agent("support", llm, memory=memory).run("hello?")
        injected = [m.content for m in llm.calls[0] if (m.content or "").startswith("Curated")]
        assert len(injected) == 1 and "The other plane says hello" in injected[0]
        # The default set later does not replace a reader's own connection.
        fa.connect(api_key=KEY, target=served.url, timeout=3)
        assert [f.fact for f in PlaneFactBlock("support", plane=there).facts("")] == [
            "The other plane says hello"
        ]
        assert "Orders ship from Lyon" in [f.fact for f in PlaneFactBlock("support").facts("")]
    finally:
        fa.disconnect()
        other.stop()
        other_store.close()


def test_connection_is_reused_across_turns(connected):
    block = PlaneFactBlock("support")
    opened = []
    real_connect = socket.socket.connect

    def counting_connect(self, address):
        opened.append(address)
        return real_connect(self, address)

    block.render("warm up")
    socket.socket.connect = counting_connect  # type: ignore[method-assign]
    try:
        for i in range(5):
            block.render(f"question {i}")
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
    assert opened == []


# -- the CLI ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_plane_serve(tmp_path):
    db = tmp_path / "cli.db"
    facts = MemoryStore(db)
    agent = f"cli-{uuid.uuid4().hex[:6]}"
    add(facts, "Served by the CLI", agent=agent)
    facts.close()
    port = free_port()
    exe = Path(sys.executable).with_name("fastaiagent")
    proc = subprocess.Popen(
        [str(exe), "plane", "serve", "--location", f"sqlite:///{db}", "--api-key", KEY,
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "plane serve did not start"
            time.sleep(0.1)
        headers = {"X-API-Key": KEY}
        answer = httpx.get(url + FACTS_PATH, params={"agent_id": agent}, headers=headers)
        assert [f["fact"] for f in answer.json()["facts"]] == ["Served by the CLI"]
        assert httpx.get(url + FACTS_PATH, params={"agent_id": agent}).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_plane_serve_rejects_a_bad_ranking():
    exe = Path(sys.executable).with_name("fastaiagent")
    done = subprocess.run(
        [str(exe), "plane", "serve", "--api-key", KEY, "--ranking", "magic"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode != 0
    assert "ranking" in (done.stdout + done.stderr)


def test_example_87_runs_offline_against_the_self_hosted_plane():
    example = Path(__file__).parents[2] / "examples" / "87_connected_memory.py"
    env = {k: v for k, v in os.environ.items() if k not in ("FASTAIAGENT_TARGET", "FASTAIAGENT_API_KEY")}
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "Curated facts:" in done.stdout
    assert '- "Refunds are accepted within 30 days of delivery' in done.stdout
    for who in ("alice:", "bob:", "no user:"):
        assert f"{who} Q:" in done.stdout and "4 curated facts" in done.stdout


@pytest.mark.embedder
def test_semantic_ranking_with_the_offline_embedder(store):
    from fastaiagent.plane.server import semantic_ranker

    with start_plane(store, KEY, ranker=semantic_ranker()) as running:
        # No word in common with the refund fact: only meaning can rank it first.
        body = get(running, query="How long may I wait before sending an item back for my money?")
        assert fact_texts(body)[0] == "Refunds are accepted within 30 days"
        assert all(0.0 <= f["score"] <= 1.0 for f in body.json()["facts"])


# -- a damaged store: health and answers say so in one line -------------------------------------


DAMAGED = "damaged.db"


def damaged_reason(folder: Path) -> str:
    """The plane's one line for the damaged file in ``folder``: the store, the file, the fix."""
    return (
        f"the fact store failed: the SQLite database '{folder / DAMAGED}' is damaged (file is not a "
        "database): restore it from a backup, or move it aside so a new one is created (the sqlite3 "
        "shell's .recover may save its rows)"
    )


@pytest.fixture
def damaged_plane(tmp_path):
    path = tmp_path / DAMAGED
    path.write_text("this is not a database\n")
    with start_plane(f"sqlite:///{path}", KEY) as running:
        yield running


def test_healthz_reads_the_store(served, damaged_plane, tmp_path):
    healthy = HTTP.get(served.url + "/healthz")
    assert (healthy.status_code, healthy.json()) == (200, {"ok": True})
    broken = HTTP.get(damaged_plane.url + "/healthz")
    assert broken.status_code == 503
    assert broken.json() == {"ok": False, "reason": damaged_reason(tmp_path)}


def test_a_damaged_store_answers_503_with_one_line(damaged_plane, tmp_path):
    answer = get(damaged_plane)
    assert answer.status_code == 503
    assert answer.json() == {"detail": damaged_reason(tmp_path)}
    assert "Traceback" not in answer.text


def test_a_reader_treats_a_damaged_plane_as_an_outage(damaged_plane):
    fa.connect(api_key=KEY, target=damaged_plane.url, timeout=3)
    try:
        block = PlaneFactBlock(agent_id="support")
        assert block.render("refunds?") == []
    finally:
        fa.disconnect()


def test_protocol_constants_are_defined_once():
    from fastaiagent.agent.memory_blocks import plane as block_module
    from fastaiagent.plane import protocol
    from fastaiagent.plane import server as server_module

    assert block_module.FACTS_PATH is protocol.FACTS_PATH is server_module.FACTS_PATH
    assert block_module.MAX_FACTS_LIMIT == protocol.MAX_FACTS_LIMIT == server_module.MAX_FACTS_LIMIT == 200


def test_the_plane_orders_through_the_recall_pipeline_and_scores_a_similarity(tmp_path):
    # Both facts hold the same words of the question: their score (the share of its
    # words, what score_threshold cuts) is equal; the recall pipeline's cue orders them:
    # "now" the newer first, "originally" the older, whatever their importance.
    facts = MemoryStore(tmp_path / "cues.db")
    day = 86400.0
    facts.add(Fact("The support desk is in Lyon", scope="agent", scope_id="support", confidence=0.9,
                   created_at=time.time() - 60 * day))  # fmt: skip
    facts.add(Fact("The support desk is in Paris", scope="agent", scope_id="support", confidence=0.5,
                   created_at=time.time() - day))  # fmt: skip
    with start_plane(facts, KEY) as running:
        now = get(running, query="Where is the support desk located now?").json()["facts"]
        first = get(running, query="Where was the support desk located originally?").json()["facts"]
        cut = get(running, query="Where is the support desk located now?", score_threshold=0.9).json()["facts"]
    facts.close()
    assert [f["fact"] for f in now] == ["The support desk is in Paris", "The support desk is in Lyon"]
    assert [f["fact"] for f in first] == ["The support desk is in Lyon", "The support desk is in Paris"]
    assert now[0]["score"] == now[1]["score"] and 0.0 < now[0]["score"] < 0.9
    assert cut == []
