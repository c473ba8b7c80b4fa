"""What the test machine offers: CI mode, servers, drivers and Chromium, read in one place.

A missing dependency skips a test on a laptop (with the reason) but FAILS it under
CI=true, so a broken service, driver or browser never passes silently in CI.
Import it as ``from _env import ...``: pytest puts tests/ on sys.path when it
loads tests/conftest.py.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

POSTGRES_URL = os.environ.get(
    "FASTAIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("FASTAIAGENT_TEST_REDIS", "redis://127.0.0.1:6379/0")


def in_ci() -> bool:
    """True when the CI environment variable says so (1 / true / yes)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(message: str) -> NoReturn:
    """Skip with ``message`` on a laptop; fail with it under CI=true.

    Works at module level too (a missing driver skips, or fails, the whole file).
    """
    if in_ci():
        pytest.fail(f"{message} (CI=true: this test must not skip)")
    pytest.skip(message, allow_module_level=True)


def require_module(name: str) -> ModuleType:
    """Import an optional driver; like ``pytest.importorskip`` but fails under CI."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"Python package {name!r} is not installed: {exc}")


def require_postgres(url: str = POSTGRES_URL) -> str:
    """The Postgres URL, once a connection to it answers."""
    psycopg = require_module("psycopg")
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        missing(f"Postgres is not reachable at {url}: {exc}")
    return url


def require_redis(url: str = REDIS_URL) -> str:
    """The Redis URL, once the server answers PING."""
    redis = require_module("redis")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        missing(f"Redis is not reachable at {url}: {exc}")
    return url


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_redis_server(data_dir: Path, *extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A Redis server of the caller's own on a free port, for tests that change
    server-wide state (the script cache, the slow log, CONFIG): ``(url, process)``.
    The caller terminates the process."""
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(data_dir), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    redis = require_module("redis")
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        for _ in range(200):  # up to 10 s
            try:
                client.ping()
                return url, process
            except redis.exceptions.ConnectionError:
                if process.poll() is not None:
                    break
                time.sleep(0.05)
    finally:
        client.close()
    process.kill()
    missing(f"a private redis-server did not start on port {port}")


def start_pgbouncer(postgres_url: str) -> tuple[str, subprocess.Popen[bytes], Path]:
    """A PgBouncer of the caller's own in transaction pooling mode on a free port, in
    front of the test Postgres (Debian's ``pgbouncer``): ``(url, process, folder)``.
    The caller terminates the process and removes the folder."""
    binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if binary is None:
        missing("pgbouncer is not installed (apt-get install pgbouncer)")
    psycopg = require_module("psycopg")
    target = psycopg.conninfo.conninfo_to_dict(postgres_url)
    user, database = target.get("user", "postgres"), target.get("dbname", "test")
    # PgBouncer refuses to run as root: as root it runs as postgres, which cannot enter
    # pytest's private temp folders, so its folder is one of /tmp it can read.
    folder = Path(tempfile.mkdtemp(prefix="fa-pgbouncer-"))
    folder.chmod(0o777)
    port = free_port()
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{database} = host={target.get('host', '127.0.0.1')} "
        f"port={target.get('port', '5432')} dbname={database}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder}/users.txt\npool_mode = transaction\n"
        "max_client_conn = 500\ndefault_pool_size = 8\nserver_reset_query =\n"
        f"logfile = {folder}/pgbouncer.log\npidfile = {folder}/pgbouncer.pid\n"
    )
    for name in ("users.txt", "pgbouncer.ini"):
        (folder / name).chmod(0o644)
    command = [binary, str(folder / "pgbouncer.ini")]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    # Its log goes to the file only: a pipe nobody reads fills up and blocks it.
    process = subprocess.Popen([*command[:-1], "-q", command[-1]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"postgresql://{user}@127.0.0.1:{port}/{database}"
    for _ in range(100):  # up to 10 s
        try:
            with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return url, process, folder
        except psycopg.Error:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
    shutil.rmtree(folder, ignore_errors=True)
    missing(f"a private pgbouncer did not start on port {port}: {log[-500:]}")


def start_pgvector_server(data_dir: Path) -> tuple[str, object]:
    """A Postgres with the pgvector extension, from the ``pgserver`` wheel, started as a
    subprocess in ``data_dir``: ``(url, server)``; ``server.cleanup()`` stops it.
    ``FASTAIAGENT_TEST_PGVECTOR`` names a running server instead (server None)."""
    given = os.environ.get("FASTAIAGENT_TEST_PGVECTOR")
    if given:
        return require_postgres(given), None
    pgserver = require_module("pgserver")
    cleanup = "stop"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # As root, pgserver runs Postgres as its own user, which cannot enter pytest's
        # private (0700) temp folders: a folder of /tmp instead, deleted with the server.
        data_dir, cleanup = Path(tempfile.mkdtemp(prefix="fa-pgvector-")), "delete"
    try:
        server = pgserver.get_server(data_dir, cleanup_mode=cleanup)
    except Exception as exc:
        missing(f"the pgserver Postgres (pgvector) did not start in {data_dir}: {exc}")
    return require_postgres(server.get_uri()), server


def chromium_paths() -> tuple[str, str]:
    """(browser, driver) paths; FASTAIAGENT_CHROMIUM / FASTAIAGENT_CHROMEDRIVER override them.

    Read at call time so a test (or a subprocess) can point them elsewhere.
    """
    return (
        os.environ.get("FASTAIAGENT_CHROMIUM", "/usr/bin/chromium"),
        os.environ.get("FASTAIAGENT_CHROMEDRIVER", "/usr/bin/chromedriver"),
    )


def require_chromium() -> tuple[str, str]:
    """The Chromium and chromedriver paths, once both exist."""
    browser, driver = chromium_paths()
    absent = [path for path in (browser, driver) if not Path(path).exists()]
    if absent:
        missing(
            f"Chromium not found at {', '.join(absent)} "
            "(apt-get install chromium chromium-driver, or set "
            "FASTAIAGENT_CHROMIUM / FASTAIAGENT_CHROMEDRIVER)"
        )
    return browser, driver


# Keeps tables and keys apart from other people's runs, and names this run's: the
# controller sets it before the xdist workers start, so they (and any process a test
# starts) share it, and the guard finds what the run left behind by it.
RUN_ID = os.environ.setdefault("FASTAIAGENT_TEST_RUN", uuid.uuid4().hex[:8])
# The process that owns the run (the controller): only it checks the run's leftovers
# at the end. A pytest session a test starts inherits the id but not the ownership,
# so it never takes what the run's other tests still hold for leftovers.
RUN_OWNER = os.environ.setdefault("FASTAIAGENT_TEST_RUN_OWNER", str(os.getpid())) == str(os.getpid())
CREATED: list[str] = []
"""Every name :func:`unique_name` made in this process, in order (the guard checks
that nothing under them outlives the test that made them)."""


def unique_name(kind: str) -> str:
    """A table name / key prefix no other test (or concurrent test run) uses:
    ``fa_<kind>_<RUN_ID>_<random>``."""
    name = f"fa_{kind}_{RUN_ID}_{uuid.uuid4().hex[:8]}"
    CREATED.append(name)
    return name


def postgres_location(url: str, table: str) -> str:
    """A location string for a Postgres store on ``table`` (the ``table=`` option)."""
    return f"{url}{'&' if '?' in url else '?'}table={table}"


def redis_location(url: str, prefix: str) -> str:
    """A location string for a Redis store under ``prefix`` (the ``prefix=`` option)."""
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


def destroy_postgres(url: str, table: str) -> None:
    """Drop everything a Postgres store on ``table`` made (``store.destroy()``)."""
    from fastaiagent.facts.postgres.store import PostgresFactStore

    store = PostgresFactStore(url, table=table)
    try:
        store.destroy()
    finally:
        store.close()


def destroy_redis(url: str, prefix: str) -> None:
    """Delete every key a Redis store under ``prefix`` wrote (``store.destroy()``)."""
    from fastaiagent.facts.redis.store import RedisFactStore

    store = RedisFactStore(url, prefix=prefix)
    try:
        store.destroy()
    finally:
        store.close()


class RedisCluster:
    """A Redis Cluster of the caller's own (see :func:`start_redis_cluster`): its
    nodes' ports and processes; :meth:`kill` ends one node, :meth:`stop` them all."""

    def __init__(self, ports: list[int], processes: list[subprocess.Popen[bytes]]) -> None:
        self.ports, self.processes = ports, processes
        self.commands: list[list[str]] = []

    @property
    def url(self) -> str:
        """A cluster location (``?cluster=true``) through the first node."""
        return f"redis://127.0.0.1:{self.ports[0]}/0?cluster=true"

    def kill(self, port: int) -> None:
        """kill -9 the node on ``port`` (no shutdown, no save)."""
        process = self.processes[self.ports.index(port)]
        process.kill()
        process.wait()

    def restart(self, port: int) -> None:
        """Start a killed node again (same port and folder: it rejoins the cluster,
        as a replica when its replica was promoted meanwhile)."""
        index = self.ports.index(port)
        self.processes[index] = subprocess.Popen(
            self.commands[index], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def start_redis_cluster(data_dir: Path, primaries: int = 3, replicas: int = 1) -> RedisCluster:
    """A Redis Cluster of ``primaries`` primaries with ``replicas`` replicas each, every node a
    ``redis-server --cluster-enabled yes`` of the caller's own on a free port in its
    own folder of ``data_dir`` (no persistence), joined by ``redis-cli --cluster
    create``; returned once every node reports ``cluster_state:ok``. The caller stops it."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        missing("redis-server / redis-cli are not installed (apt-get install redis-server)")
    redis = require_module("redis")
    ports, processes = _cluster_ports((1 + replicas) * primaries), []
    cluster = RedisCluster(ports, processes)
    for port in ports:
        folder = data_dir / str(port)
        folder.mkdir()
        cluster.commands.append(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--cluster-enabled", "yes",
             "--cluster-config-file", str(folder / "nodes.conf"), "--cluster-node-timeout", "2000"]
        )  # fmt: skip
        processes.append(subprocess.Popen(
            cluster.commands[-1], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ))
    try:
        for port in ports:
            _wait_ping(redis, port)
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(created.stdout[-800:] + created.stderr[-800:])
        wait_cluster_ok(ports)
        if replicas:
            wait_replicas_linked(ports)
    except Exception as exc:
        cluster.stop()
        missing(f"a private Redis Cluster did not start on ports {ports}: {exc}")
    return cluster


def _cluster_ports(count: int) -> list[int]:
    """Free ports whose cluster bus ports (port + 10000) are free too."""
    import socket

    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port + 10000 > 65535 or port in ports or port + 10000 in ports:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        ports.append(port)
    return ports


def _wait_ping(redis: ModuleType, port: int) -> None:
    client = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        for _ in range(200):  # up to 10 s
            try:
                client.ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"node {port} does not answer")
    finally:
        client.close()


def replica_of(ports: list[int], primary: int) -> int:
    """The port of the node of ``ports`` that replicates the one on ``primary``."""
    import redis

    for port in ports:
        client = redis.Redis(port=port, socket_connect_timeout=1, decode_responses=True)
        try:
            info = client.info("replication")
        finally:
            client.close()
        if info["role"] == "slave" and int(info.get("master_port", 0)) == primary:
            return port
    raise RuntimeError(f"no replica of {primary} among {ports}")


def wait_promoted(port: int, timeout: float = 60.0) -> float:
    """Until the node on ``port`` is a primary (its primary failed over to it);
    returns the seconds waited."""
    import redis

    started = time.monotonic()
    client = redis.Redis(port=port, socket_connect_timeout=1, decode_responses=True)
    try:
        while client.info("replication")["role"] != "master":
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"node {port} was not promoted after {timeout} s")
            time.sleep(0.1)
    finally:
        client.close()
    return time.monotonic() - started


def wait_replicas_linked(ports: list[int], timeout: float = 30.0) -> None:
    """Until every answering replica of ``ports`` has its link to its primary up and
    every answering primary has a replica (a write's WAIT can then be answered)."""

    def linked(client: Any) -> bool:
        info = client.info("replication")
        if info["role"] == "master":
            return int(info.get("connected_slaves", 0)) >= 1
        return bool(info.get("master_link_status") == "up")

    _wait_every_node(ports, linked, "the cluster's replicas are not linked", timeout)


def wait_cluster_ok(ports: list[int], timeout: float = 30.0) -> None:
    """Until every node of ``ports`` that answers reports ``cluster_state:ok`` with
    all 16384 slots served (a node that does not answer is skipped: a killed one)."""

    def ok(client: Any) -> bool:
        info = client.cluster("info")
        return info.get("cluster_state") == "ok" and int(info.get("cluster_slots_ok", 0)) == 16384

    _wait_every_node(ports, ok, "the cluster is not ok", timeout)


def _wait_every_node(ports: list[int], check: Callable[[Any], bool], failure: str, timeout: float) -> None:
    """Until ``check(client)`` holds on every node of ``ports`` that answers (at least one)."""
    import redis

    deadline = time.monotonic() + timeout
    while True:
        states = []
        for port in ports:
            client = redis.Redis(port=port, socket_connect_timeout=1, decode_responses=True)
            try:
                states.append(check(client))
            except redis.exceptions.ConnectionError:
                pass
            finally:
                client.close()
        if states and all(states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{failure} after {timeout} s")
        time.sleep(0.1)
