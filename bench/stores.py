"""Fact store benchmark: SQLite, Postgres and Redis.

Per backend it measures
- add/s: single-threaded ``store.add`` of distinct facts (each a real write);
- read p50: ``list_active(limit=50)`` of a random subject holding 50 facts, in
  a store of 10k facts (200 subjects) and one of 1M (20k subjects), read in
  alternating rounds so both see the same machine load, and the ratio of the
  two (a read should cost what it returns, not what is stored);
- read p50 with half the store expired: the 10k-fact store beside one whose
  200 subjects each hold the same 50 valid facts plus 50 expired ones
  interleaved with them (``valid_to`` in the past), read in alternating rounds;
  ``expired_ratio`` (half expired / none expired) should stay <= 1.2;
- forget: ``delete`` of one user holding 10k and 100k facts: the total time,
  the longest single server call (one delete step: a SQLite write transaction,
  a Postgres statement, a Redis script, timed at the client) and the longest
  answer a second client got meanwhile (SQLite: a write, which needs the lock;
  Postgres: SELECT 1; Redis: PING; target <= 50 ms: the bound
  tests/backends/test_big_subjects.py checks by counts instead); before it, on
  that user, ``update(old=<text>)``, ``forget(fact=<text>)`` and the default
  ``retrieve()`` page (by index: milliseconds at any size);
- forget of recall: ``Memory(location).forget`` of one user holding 100k
  recalled messages (chunks with vectors and keyword postings in the store's
  own vector index), with the longest answer of the same second client
  (target <= 50 ms) and the total time.

The large data sets are bulk-loaded (executemany / COPY / pipelines) in the
store's own layout, not through ``add``. Results go to bench/results/stores.json.

    python bench/stores.py                 # all backends, 10k vs 1M
    python bench/stores.py --quick         # 10k vs 100k, fewer samples
    python bench/stores.py --backends sqlite,redis
    python bench/stores.py --quick --forget-only

Targets: SQLite >= 5,000 adds/s and read p50 <= 0.1 ms; Postgres read p50
<= 0.5 ms; Redis read p50 <= 0.3 ms; every ratio (1M / 10k) <= 1.2, and
every expired_ratio (half the store expired / none) <= 1.2.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, time_calls, write_results

from fastaiagent.facts.scoping import normalize_text
from fastaiagent.learn import Fact, FactStore, MemoryStore

POSTGRES_URL = os.environ.get(
    "FASTAIAGENT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
# A database number of its own, so other people's SCANs don't walk our million keys.
REDIS_URL = os.environ.get("FASTAIAGENT_BENCH_REDIS", "redis://127.0.0.1:6379/13")
PER_SUBJECT = 50
TARGETS = {
    "sqlite": {"adds_per_s": 5000, "read_p50_ms": 0.1},
    "postgres": {"read_p50_ms": 0.5},
    "redis": {"read_p50_ms": 0.3},
}
MAX_RATIO = 1.2


def subject_id(n: int) -> str:
    return f"user-{n:06d}"


def rows(
    first_subject: int, last_subject: int, base: float, *, expired: bool = False
) -> Iterator[tuple[str, str, float, float | None]]:
    """(text, scope_id, created_at, valid_to) of 50 facts per subject, oldest first;
    ``expired``: 50 more per subject, interleaved, whose validity ended before ``base``."""
    for s in range(first_subject, last_subject):
        for k in range(PER_SUBJECT):
            at = base + s * 1e-3 + k * 1e-6
            yield f"Fact {k} about {subject_id(s)}", subject_id(s), at, None
            if expired:
                yield f"Expired fact {k} about {subject_id(s)}", subject_id(s), at + 5e-7, base - 1


# -- bulk loaders (the store's own layout, fast paths) -----------------------


def bulk_sqlite(
    store: MemoryStore, first: int, last: int, base: float, expired: bool = False
) -> None:
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, project_id, confidence, "
        "source, created_at, metadata, valid_to) "
        "VALUES (?, ?, 'user', ?, '', 1.0, 'manual', ?, '{}', ?)",
        (
            (t, normalize_text(t), sid, ts, end)
            for t, sid, ts, end in rows(first, last, base, expired=expired)
        ),
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def bulk_postgres(store: Any, first: int, last: int, base: float, expired: bool = False) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        query = sql.SQL(
            "COPY {} (fact, fact_key, scope, scope_id, project_id, created_at, valid_to) FROM STDIN"
        ).format(sql.Identifier(store.table))
        with conn.cursor() as cur, cur.copy(query) as copy:
            for text, sid, ts, end in rows(first, last, base, expired=expired):
                copy.write_row((text, normalize_text(text), "user", sid, "", ts, end))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(store.table)))


def bulk_redis(store: Any, first: int, last: int, base: float, expired: bool = False) -> None:
    client = store._client
    next_id = int(client.get(store._k("seq")) or 0)
    pipe = client.pipeline(transaction=False)
    i = 0
    for i, (text, sid, ts, end) in enumerate(rows(first, last, base, expired=expired), start=1):
        fact = Fact(text, scope="user", scope_id=sid, created_at=ts, valid_to=end)
        store._queue_create(pipe, next_id + i, fact, normalize_text(text))
        if i % 2000 == 0:
            pipe.execute()
    pipe.execute()
    client.set(store._k("seq"), next_id + i)


def one_user(count: int) -> Iterator[tuple[str, str, float]]:
    """(text, scope_id, created_at) of ``count`` facts of the user ``doomed``."""
    for n in range(count):
        yield f"Doomed fact {n}", "doomed", 1e6 + n


def load_user_sqlite(store: MemoryStore, count: int) -> None:
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, project_id, confidence, "
        "source, created_at, metadata) VALUES (?, ?, 'user', ?, '', 1.0, 'manual', ?, '{}')",
        ((t, normalize_text(t), sid, ts) for t, sid, ts in one_user(count)),
    )
    conn.execute("COMMIT")
    conn.close()


def load_user_postgres(store: Any, count: int) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        query = sql.SQL(
            "COPY {} (fact, fact_key, scope, scope_id, project_id, created_at) FROM STDIN"
        ).format(sql.Identifier(store.table))
        with conn.cursor() as cur, cur.copy(query) as copy:
            for text, sid, ts in one_user(count):
                copy.write_row((text, normalize_text(text), "user", sid, "", ts))


def load_user_redis(store: Any, count: int) -> None:
    client = store._client
    first = int(client.incrby(store._k("seq"), count)) - count
    pipe = client.pipeline(transaction=False)
    for i, (text, sid, ts) in enumerate(one_user(count), start=1):
        store._queue_create(
            pipe,
            first + i,
            Fact(text, scope="user", scope_id=sid, created_at=ts),
            normalize_text(text),
        )
        if i % 2000 == 0:
            pipe.execute()
    pipe.execute()


class StepTimer:
    """Times each call of one of the store's own per-step functions (a bench
    may reach into the store; the library never does this)."""

    def __init__(self, store: Any, name: str, *, context: bool = False) -> None:
        self.store, self.name, self.longest = store, name, 0.0
        self.calls = 0
        inner = getattr(store, name)
        self._own = store.__dict__.get(name)  # an instance attribute (a Redis script) or None
        if context:
            from contextlib import contextmanager

            @contextmanager
            def timed_cm(*args: Any, **kwargs: Any) -> Iterator[Any]:
                started = time.perf_counter()
                with inner(*args, **kwargs) as value:
                    yield value
                self._record(started)

            setattr(store, name, timed_cm)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    self._record(started)

            setattr(store, name, timed)

    def _record(self, started: float) -> None:
        self.longest = max(self.longest, time.perf_counter() - started)
        self.calls += 1

    def remove(self) -> None:
        if self._own is not None:
            setattr(self.store, self.name, self._own)
        else:
            delattr(self.store, self.name)


def second_client(name: str, store: Any) -> tuple[Callable[[], Any], Callable[[], None]]:
    """A call on a connection of its own (see the docstring), and its closer."""
    if name == "sqlite":
        conn = sqlite3.connect(
            store.path, check_same_thread=False, timeout=60, isolation_level=None
        )

        def write() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")

        return write, conn.close
    if name == "postgres":
        import psycopg

        pg = psycopg.connect(POSTGRES_URL, autocommit=True)
        return (lambda: pg.execute("SELECT 1").fetchone()), pg.close
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    return client.ping, client.close


def measure_one_text(store: Any) -> dict[str, float]:
    """On the loaded user ``doomed``: ``update(new, old=<text>)``, ``forget(fact=<text>)``
    and the default ``retrieve()`` page, each timed once (all by index: they cost the
    same for 10k or 100k facts). Leaves as many facts as it found."""
    from fastaiagent import Memory

    mem = Memory(location=store)
    timed = {}
    for key, call in (
        ("update_old_ms", lambda: mem.update("Doomed moved", old="Doomed fact 5", id="doomed")),
        ("forget_text_ms", lambda: mem.forget(tier="user", id="doomed", fact="Doomed fact 6")),
        ("page_ms", lambda: mem.retrieve(tier="user", id="doomed")),
    ):
        started = time.perf_counter()
        call()
        timed[key] = round((time.perf_counter() - started) * 1000, 2)
    return timed


def measure_forget(name: str, store: Any, count: int) -> dict[str, float]:
    """The one-text paths on one user of ``count`` facts (:func:`measure_one_text`),
    then the delete of that user while a second client is timed."""
    loader = {"sqlite": load_user_sqlite, "postgres": load_user_postgres, "redis": load_user_redis}
    loader[name](store, count)
    one_text = measure_one_text(store)
    step = {
        "sqlite": ("_write", True),
        "postgres": ("_run", False),
        "redis": ("_delete_some", False),
    }
    timer = StepTimer(store, step[name][0], context=step[name][1])
    try:
        deleted, elapsed, worst = while_probed(name, store, lambda: store.delete("user", "doomed"))
    finally:
        timer.remove()
    assert deleted == count, (deleted, count)  # one added by the update, one forgotten
    return {
        "facts": count,
        **one_text,
        "forget_s": round(elapsed, 3),
        "steps": timer.calls,
        "longest_call_ms": round(timer.longest * 1000, 2),
        "second_client_max_ms": round(worst * 1000, 2),
    }


def while_probed(name: str, store: Any, work: Callable[[], Any]) -> tuple[Any, float, float]:
    """``work()``'s result, its time, and the longest answer of a second client
    (:func:`second_client`) that kept calling meanwhile."""
    call, close = second_client(name, store)
    stop, worst = threading.Event(), [0.0]

    def probe() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            call()
            worst[0] = max(worst[0], time.perf_counter() - began)
            stop.wait(0.001)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        result = work()
    finally:
        elapsed = time.perf_counter() - started
        stop.set()
        thread.join(10)
        close()
    return result, elapsed, worst[0]


def load_recall(store: Any, count: int, batch: int = 2_000) -> None:
    """``count`` recalled messages of the user ``doomed`` in the store's vector index."""
    from fastaiagent.kb.protocols import Chunk

    index, rng = store.vector_store(), random.Random(7)
    for start in range(0, count, batch):
        index.add([
            Chunk(f"doomed-{n}", f"message {n} about topic{n % 97} and word{n % 1013}",
                  [rng.uniform(-1, 1) for _ in range(32)],
                  {"namespace": "user:doomed", "role": "user", "created_at": 1e6 + n})
            for n in range(start, min(count, start + batch))
        ])  # fmt: skip


def measure_recall_forget(name: str, store: Any, count: int) -> dict[str, float]:
    """``Memory(store).forget`` of a user with ``count`` recalled messages, while a
    second client is timed."""
    from fastaiagent import Memory

    started = time.perf_counter()
    load_recall(store, count)
    loaded = time.perf_counter() - started
    _, elapsed, worst = while_probed(
        name, store, lambda: Memory(store).forget(tier="user", id="doomed")
    )
    left = store.vector_store().count("user:doomed")
    assert left == 0, left
    return {
        "recalled": count,
        "load_s": round(loaded, 1),
        "forget_s": round(elapsed, 3),
        "second_client_max_ms": round(worst * 1000, 2),
    }


# -- backends ------------------------------------------------------------------


def open_sqlite(workdir: Path) -> tuple[FactStore, Callable[[], None]]:
    workdir.mkdir(parents=True, exist_ok=True)
    store = MemoryStore(workdir / "bench.db")
    return store, store.close


def open_postgres(workdir: Path) -> tuple[FactStore, Callable[[], None]]:
    import psycopg
    from psycopg import sql

    from fastaiagent.facts.postgres.store import PostgresFactStore

    table = f"bench_{uuid.uuid4().hex[:10]}"
    store = PostgresFactStore(POSTGRES_URL, table=table)

    def cleanup() -> None:
        store.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))

    return store, cleanup


def open_redis(workdir: Path) -> tuple[FactStore, Callable[[], None]]:
    from fastaiagent.facts.redis.store import RedisFactStore

    prefix = f"bench-{uuid.uuid4().hex[:10]}"
    store = RedisFactStore(REDIS_URL, prefix=prefix)

    def cleanup() -> None:
        client = store._client
        batch: list[str] = []
        for key in client.scan_iter(match=prefix + ":*", count=5000):
            batch.append(key)
            if len(batch) >= 5000:
                client.unlink(*batch)
                batch = []
        if batch:
            client.unlink(*batch)
        store.close()

    return store, cleanup


BACKENDS: dict[str, tuple[Callable[..., Any], Callable[..., None]]] = {
    "sqlite": (open_sqlite, bulk_sqlite),
    "postgres": (open_postgres, bulk_postgres),
    "redis": (open_redis, bulk_redis),
}


def measure_adds(store: FactStore, count: int) -> float:
    facts = [
        Fact(
            f"Add benchmark fact {i}", scope="user", scope_id=f"adder-{i % 100}", project_id="adds"
        )
        for i in range(count)
    ]
    store.add(Fact("warm up", scope="user", scope_id="adder", project_id="adds"))
    start = time.perf_counter()
    for fact in facts:
        store.add(fact)
    return count / (time.perf_counter() - start)


def measure_reads(
    small: FactStore, small_subjects: int, big: FactStore, big_subjects: int, samples: int
) -> tuple[dict[str, float], dict[str, float]]:
    """p50 of list_active(limit=50) on both stores, read in alternating rounds
    so both see the same machine load (the box may be shared)."""
    rng = random.Random(7)
    rounds, per_round = 20, max(1, samples // 20)
    timings: dict[int, list[float]] = {0: [], 1: []}
    stores = ((small, small_subjects), (big, big_subjects))
    for store, subjects in stores:  # warm up both
        for _ in range(200):
            store.list_active("user", subject_id(rng.randrange(subjects)), limit=50)
    for _ in range(rounds):
        for which, (store, subjects) in enumerate(stores):
            picks = [subject_id(rng.randrange(subjects)) for _ in range(per_round)]

            def read(i: int, store: FactStore = store, picks: list[str] = picks) -> None:
                got = store.list_active("user", picks[i], limit=50)
                assert len(got) == PER_SUBJECT, (picks[i], len(got))

            timings[which] += time_calls(read, per_round, warmup=0)
    return summary(timings[0]), summary(timings[1])


def run_backend(name: str, big_subjects: int, adds: int, samples: int) -> dict[str, Any]:
    """Adds on a fresh store; then reads on a 10k-fact store and a large one, side by side."""
    opener, bulk = BACKENDS[name]
    small_subjects = 200
    with tempfile.TemporaryDirectory() as tmp:
        small, cleanup_small = opener(Path(tmp) / "small")
        big, cleanup_big = opener(Path(tmp) / "big")
        try:
            result: dict[str, Any] = {"adds_per_s": round(measure_adds(small, adds))}
            base = time.time() - 10_000
            bulk(small, 0, small_subjects, base)
            big.list_active("user", "nobody")  # first open: schema / layout
            started = time.perf_counter()
            bulk(big, 0, big_subjects, base)
            result["bulk_load_s"] = round(time.perf_counter() - started, 1)
            result["read_small"], result["read_big"] = measure_reads(
                small, small_subjects, big, big_subjects, samples
            )
            result["small_facts"] = small_subjects * PER_SUBJECT
            result["big_facts"] = big_subjects * PER_SUBJECT
            result["ratio"] = round(
                result["read_big"]["p50_ms"] / result["read_small"]["p50_ms"], 3
            )
            result.update(measure_expired(name, small, small_subjects, base, samples, Path(tmp)))
            result["checks"] = check(name, result)
            return result
        finally:
            cleanup_small()
            cleanup_big()


def measure_expired(
    name: str, clean: FactStore, subjects: int, base: float, samples: int, tmp: Path
) -> dict[str, Any]:
    """Reads of the clean store beside one whose every subject also holds 50 expired facts."""
    opener, bulk = BACKENDS[name]
    half, cleanup = opener(tmp / "expired")
    try:
        half.list_active("user", "nobody")  # first open: schema / layout
        bulk(half, 0, subjects, base, True)
        none_expired, half_expired = measure_reads(clean, subjects, half, subjects, samples)
        return {
            "read_none_expired": none_expired,
            "read_half_expired": half_expired,
            "expired_ratio": round(half_expired["p50_ms"] / none_expired["p50_ms"], 3),
        }
    finally:
        cleanup()


def run_forget(name: str, sizes: list[int], recall_sizes: list[int]) -> list[dict[str, float]]:
    opener = BACKENDS[name][0]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        store, cleanup = opener(Path(tmp) / "forget")
        try:
            store.list_active("user", "nobody")  # first open: schema / layout
            for size in sizes:
                out.append(measure_forget(name, store, size))
            for size in recall_sizes:
                out.append(measure_recall_forget(name, store, size))
        finally:
            cleanup()
    return out


def check(name: str, result: dict[str, Any]) -> dict[str, bool]:
    target = TARGETS[name]
    out = {"ratio": result["ratio"] <= MAX_RATIO, "expired_ratio": result["expired_ratio"] <= MAX_RATIO}
    if "adds_per_s" in target:
        out["adds_per_s"] = result["adds_per_s"] >= target["adds_per_s"]
    out["read_p50"] = (
        max(result["read_small"]["p50_ms"], result["read_big"]["p50_ms"]) <= target["read_p50_ms"]
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10k vs 100k facts, fewer samples")
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument(
        "--forget-sizes", default="10000,100000", help="facts of the forgotten user(s)"
    )
    parser.add_argument(
        "--recall-forget-sizes", default="100000", help="recalled messages of the forgotten user"
    )
    parser.add_argument("--forget-only", action="store_true", help="only the forget figures")
    args = parser.parse_args()
    big_subjects = 2_000 if args.quick else 20_000
    adds = 2_000 if args.quick else 10_000
    samples = 1_000 if args.quick else 5_000
    results: dict[str, Any] = {}
    load_before = os.getloadavg()
    print(f"load average {load_before[0]:.1f} on {os.cpu_count()} cores", flush=True)
    sizes = [int(n) for n in args.forget_sizes.split(",") if n]
    for name in args.backends.split(","):
        print(f"[{name}] running ...", flush=True)
        recall_sizes = [int(n) for n in args.recall_forget_sizes.split(",") if n]
        forget = run_forget(name, sizes, recall_sizes)
        for f in forget:
            if "recalled" in f:
                print(
                    f"[{name}] forget of {f['recalled']:,} recalled messages {f['forget_s']:.2f} s "
                    f"| second client max {f['second_client_max_ms']:.1f} ms (loaded in {f['load_s']} s)",
                    flush=True,
                )
                continue
            print(
                f"[{name}] forget of {f['facts']:,} facts {f['forget_s']:.2f} s in "
                f"{f['steps']} steps | longest call {f['longest_call_ms']:.1f} ms | "
                f"second client max {f['second_client_max_ms']:.1f} ms | one text: update(old=) "
                f"{f['update_old_ms']:.1f} ms, forget(fact=) {f['forget_text_ms']:.1f} ms, "
                f"page {f['page_ms']:.1f} ms",
                flush=True,
            )
        if args.forget_only:
            results[name] = {"forget": forget}
            continue
        results[name] = run_backend(name, big_subjects, adds, samples)
        results[name]["forget"] = forget
        r = results[name]
        print(
            f"[{name}] add/s {r['adds_per_s']:>8,} | list_active(limit=50) p50 "
            f"{r['read_small']['p50_ms']:.3f} ms at {r['small_facts']:,} facts, "
            f"{r['read_big']['p50_ms']:.3f} ms at {r['big_facts']:,} ({big_subjects:,} subjects) "
            f"| ratio {r['ratio']:.2f} | half expired p50 {r['read_half_expired']['p50_ms']:.3f} ms, "
            f"expired_ratio {r['expired_ratio']:.2f} | bulk load {r['bulk_load_s']} s | "
            + " ".join(f"{k}={'ok' if v else 'MISS'}" for k, v in r["checks"].items()),
            flush=True,
        )
    load_after = os.getloadavg()
    print(f"load average {load_after[0]:.1f} at the end", flush=True)
    path = write_results(
        "stores" + ("_quick" if args.quick else ""),
        {
            "quick": args.quick,
            "cores": os.cpu_count(),
            "load_average": [round(load_before[0], 2), round(load_after[0], 2)],
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
