"""Every example runs, as a user would run it, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _env import POSTGRES_URL, REDIS_URL, require_chromium

ROOT = Path(__file__).resolve().parents[2]

# (script, backend): a script given a backend gets a location of the test's own
# (a table or key prefix, never the default). The connected-memory example runs
# in tests/integration/test_plane_server.py (it needs a plane).
EXAMPLES = [
    ("examples/memory_simple/companion.py", ""),
    ("examples/100_memory_in_production.py", ""),
    ("examples/memory_backends/run.py", ""),
    ("examples/memory_backends/run.py", "postgres"),
    ("examples/memory_backends/run.py", "redis"),
]


def run_example(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a user would, from ``tmp_path`` with no FASTAIAGENT_LOCAL_DB:
    the default location is then ``tmp_path/.fastaiagent/``, which no example may touch
    (it is where ``make demo`` and the user's own agents keep their memory)."""
    env = {k: v for k, v in os.environ.items() if k != "FASTAIAGENT_LOCAL_DB"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    default = tmp_path / ".fastaiagent"
    assert not default.exists(), f"{script} wrote the default location: {sorted(default.iterdir())}"
    return done


@pytest.mark.parametrize(("script", "backend"), EXAMPLES, ids=[" ".join(e).strip() for e in EXAMPLES])
def test_example_runs(script, backend, tmp_path, own_location):
    args = [own_location(backend)] if backend else []
    done = run_example(script, args, tmp_path)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{script} printed nothing"
    # The offline models answer from the facts, as a chat model would: no memory preamble.
    assert "Remembered notes" not in done.stdout


@pytest.mark.browser
def test_observability_examples_seed_traces_and_capture_the_pages(tmp_path):
    require_chromium()  # snapshot.py reads the same FASTAIAGENT_CHROMIUM* variables
    seeded = run_example("examples/memory_observability/companion.py", [], tmp_path)
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    assert "Remembered notes" not in seeded.stdout
    assert "Here is what I remember: Support hours are 9:00-17:00 CET; Lives in Oslo" in seeded.stdout
    shots = tmp_path / "shots"
    captured = run_example("examples/memory_observability/snapshot.py", ["--out", str(shots)], tmp_path)
    assert captured.returncode == 0, captured.stdout + captured.stderr
    pngs = sorted(p.name for p in shots.glob("*.png"))
    assert {"memory.png", "traces.png"} <= set(pngs)
    assert all((shots / name).stat().st_size > 5_000 for name in pngs)


# -- the backends example removes everything it wrote ------------------------------


def _left_behind(backend: str, location: str, folder: Path) -> list[str]:
    """What is left of a location, read past the library (which would make tables)."""
    if backend == "sqlite":
        return sorted(p.name for p in (folder / ".fastaiagent-examples").glob("memory_backends.db*"))
    name = location.rsplit("=", 1)[1]
    if backend == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(
                "SELECT relname FROM pg_class WHERE relname LIKE %s "
                "UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE %s",
                (f"{name}%", f"%{name}%"),
            ).fetchall()
        return sorted(str(row[0]) for row in rows)
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        return sorted(key.decode() for key in client.scan_iter(match=f"{name}*"))
    finally:
        client.close()


@pytest.mark.parametrize(
    "backend",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("redis", marks=pytest.mark.redis)],
)
def test_the_backends_example_leaves_nothing_behind(backend, tmp_path, own_location):
    location = own_location(backend) if backend != "sqlite" else ""
    done = run_example("examples/memory_backends/run.py", [location] if location else [], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed" in done.stdout and "whole" in done.stdout
    assert _left_behind(backend, location, tmp_path) == []


def test_the_backends_example_keeps_a_location_s_other_facts(tmp_path, own_location):
    from fastaiagent.facts import Fact
    from fastaiagent.facts.factory import make_fact_store

    location = own_location("sqlite")
    store = make_fact_store(location)
    store.add(Fact("Prefers tea", scope="user", scope_id="carol", project_id="theirs"))
    store.close()
    done = run_example("examples/memory_backends/run.py", [location], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the location held other facts, which stay" in done.stdout
    store = make_fact_store(location)
    try:
        assert [(s.project_id, s.scope_id, s.count) for s in store.subjects(include_superseded=True)] == [
            ("theirs", "carol", 1)
        ]
    finally:
        store.close()
