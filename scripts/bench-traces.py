#!/usr/bin/env python3
"""Traces (SPEC §15): what exporting them costs a run, through `loopwright run`.

A chain of N `true` stages (plan mode, unsandboxed) run with tracing off, on (an OTLP/HTTP
collector on 127.0.0.1 that answers 200 and counts what it gets), and on with the collector down
(its port closed). Rounds are interleaved; each command's wall time, the run's own time (its
journal's first to last entry: the command's exit, which may wait for the collector, aside) and
peak memory (the process's maximum resident set, from wait4) are kept, and the medians printed
as JSON.

Usage: python3 scripts/bench-traces.py --bin target/release/loopwright [--stages 1000] [--rounds 5]
"""

import argparse
import datetime
import http.server
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time


class Collector(http.server.BaseHTTPRequestHandler):
    """Answers every POST with 200, counting requests and bytes."""

    requests = 0
    received = 0

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        Collector.requests += 1
        Collector.received += n
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workspace(root, stages):
    os.makedirs(os.path.join(root, ".loopwright", "pipelines"))
    with open(os.path.join(root, ".loopwright", "config.toml"), "w") as f:
        f.write('sandbox = "off"\n')
    body = "name: chain\ndescription: bench\nversion: 1\nstages:\n"
    for i in range(stages):
        body += f"  - id: s{i}\n    description: x\n    agent: shell\n    mode: plan\n    run: 'true'\n"
    with open(os.path.join(root, ".loopwright", "pipelines", "chain.yml"), "w") as f:
        f.write(body)


def run(binary, root, endpoint):
    env = dict(os.environ)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    start = time.perf_counter()
    child = subprocess.Popen([binary, "-C", root, "run", "chain", "--quiet", "--json"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed: {child.stderr.read().decode()}")
    logs = subprocess.run([binary, "-C", root, "logs", "latest", "--json"], capture_output=True, text=True, check=True)
    events = [json.loads(line) for line in logs.stdout.splitlines()]
    ts = [datetime.datetime.fromisoformat(e["at"].replace("Z", "+00:00")) for e in (events[0], events[-1])]
    own = (ts[1] - ts[0]).total_seconds() * 1000
    return took * 1000, own, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--stages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    binary = os.path.abspath(args.bin)
    up_port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", up_port), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    modes = {"off": None, "on": f"http://127.0.0.1:{up_port}", "collector down": f"http://127.0.0.1:{free_port()}"}
    times = {m: [] for m in modes}
    own = {m: [] for m in modes}
    memory = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as base:
        for r in range(args.rounds):
            for mode, endpoint in modes.items():
                root = os.path.join(base, f"{mode.replace(' ', '-')}-{r}")
                workspace(root, args.stages)
                ms, run_ms, mb = run(binary, root, endpoint)
                times[mode].append(ms)
                own[mode].append(run_ms)
                memory[mode].append(mb)
    off = statistics.median(times["off"])
    out = {
        "stages": args.stages,
        "rounds": args.rounds,
        "spans_requests": Collector.requests,
        "spans_bytes": Collector.received,
        "modes": {
            m: {
                "median_ms": round(statistics.median(times[m]), 1),
                "vs_off": round(statistics.median(times[m]) / off, 3),
                "run_median_ms": round(statistics.median(own[m]), 1),
                "peak_mb": round(statistics.median(memory[m]), 1),
            }
            for m in modes
        },
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
