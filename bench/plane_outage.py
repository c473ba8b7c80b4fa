"""What a plane outage costs: one wait per pause window, not one per turn.

A loopback plane answers normally, then goes down. Scenarios:

1. ``503_30s``: 1,000 turns spread over a 30 s outage (an injected clock
   stands for the 30 s; the HTTP is real) from 10 users sharing the pause.
   Target: at most 2 requests (the failure, then one retry when the pause ends).
2. ``hang_realtime``: the plane hangs; 1,000 turns in real time with a 1 s
   read timeout. Target: one timeout paid in total, every other turn instant.
3. ``healthy``: per-turn cost of a plane read on loopback when all is well.

    python bench/plane_outage.py [--turns 1000] [--timeout 1.0]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import summary, time_calls, write_results

import fastaiagent as fa
from fastaiagent.agent.memory_blocks import PlaneFactBlock
from fastaiagent.plane import client as plane

FACTS = json.dumps({"facts": [{"id": 1, "fact": "Refunds take 30 days"}]}).encode()


class Plane:
    """Loopback plane with a mode switch: "ok", "503" or "hang"."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.requests += 1
                if owner.mode == "hang":
                    owner.release.wait(60)
                status, body = (503, b"busy") if owner.mode == "503" else (200, FACTS)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def outage_503(turns: int, users: int = 10) -> dict[str, Any]:
    server = Plane()
    clock = FakeClock()
    real_clock = plane.backoff().clock
    plane.backoff().clock = clock
    fa.connect(api_key="bench", target=server.url, timeout=1.0)
    try:
        blocks = [PlaneFactBlock("bench-agent") for _ in range(users)]
        for block in blocks:
            block.render("refunds?")
        before = server.requests
        server.mode = "503"
        served_cached = 0
        for i in range(turns):  # turn i happens at i * 30 / (turns - 1) s into the outage
            clock.now = 30.0 * i / (turns - 1)
            if blocks[i % users].render("refunds?"):
                served_cached += 1
        return {
            "turns": turns,
            "users": users,
            "outage_seconds": 30.0,
            "requests_during_outage": server.requests - before,
            "turns_served_last_facts": served_cached,
            "target_max_requests": 2,
        }
    finally:
        fa.disconnect()
        plane.backoff().clock = real_clock
        server.stop()


def outage_hang(turns: int, timeout: float) -> dict[str, Any]:
    server = Plane()
    fa.connect(api_key="bench", target=server.url, timeout=timeout)
    try:
        block = PlaneFactBlock("bench-agent")
        block.render("refunds?")
        before = server.requests
        server.mode = "hang"
        started = time.perf_counter()
        latencies = []
        for _ in range(turns):
            t0 = time.perf_counter()
            block.render("refunds?")
            latencies.append((time.perf_counter() - t0) * 1000)
        total = time.perf_counter() - started
        return {
            "turns": turns,
            "read_timeout_s": timeout,
            "requests_during_outage": server.requests - before,
            "total_seconds": round(total, 3),
            "first_turn_ms": round(latencies[0], 1),
            "other_turns": summary(latencies[1:]),
            "without_backoff_would_wait_s": round(turns * timeout, 1),
        }
    finally:
        fa.disconnect()
        server.stop()


def healthy(count: int) -> dict[str, Any]:
    server = Plane()
    fa.connect(api_key="bench", target=server.url, timeout=1.0)
    try:
        block = PlaneFactBlock("bench-agent")
        samples = time_calls(lambda i: block.render(f"question {i}"), count, warmup=50)
        return {"read_per_turn": summary(samples)}
    finally:
        fa.disconnect()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=1.0)
    args = parser.parse_args()
    results = {
        "503_30s": outage_503(args.turns),
        "hang_realtime": outage_hang(args.turns, args.timeout),
        "healthy": healthy(500),
    }
    path = write_results("plane_outage", results)
    a, b, c = results["503_30s"], results["hang_realtime"], results["healthy"]
    print(
        f"503 outage, {a['turns']} turns over 30 s, {a['users']} users: "
        f"{a['requests_during_outage']} requests (target <= 2), "
        f"{a['turns_served_last_facts']} turns served the last facts"
    )
    print(
        f"hanging plane, {b['turns']} turns, {b['read_timeout_s']} s timeout: "
        f"{b['requests_during_outage']} request(s), {b['total_seconds']} s in total "
        f"(first turn {b['first_turn_ms']} ms, others p50 {b['other_turns']['p50_ms']} ms "
        f"p99 {b['other_turns']['p99_ms']} ms; without back-off ~{b['without_backoff_would_wait_s']} s)"
    )
    print(
        f"healthy loopback read: p50 {c['read_per_turn']['p50_ms']} ms, "
        f"p99 {c['read_per_turn']['p99_ms']} ms"
    )
    print(f"wrote {path}")
    ok = a["requests_during_outage"] <= 2 and b["requests_during_outage"] <= 1
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
