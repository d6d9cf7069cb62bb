#!/usr/bin/env python3
"""The daemon's queue on one machine (docs/benchmarks.md, "The queue"):

    cargo build --release && python3 scripts/bench-queue.py [--runs 20] [--bin target/release/loopwright]

1. RUNS runs queued at once through the API, each one agent-mode shell stage of `sleep 0.03`,
   all in the workspace (one working tree), `serve --max-runs 4`: the wall time from the first
   POST to the last run's end, the time spent in the stages, the overhead (the rest, per
   run), and whether they started in the order they were queued;
2. the idle daemon: how often its threads wake (voluntary and involuntary context switches
   per second over 10 s) and its CPU time, with nothing to do.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from importlib import import_module  # noqa: E402

bench = import_module("bench-daemon")


def switches(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def when(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/loopwright")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    bin_path = os.path.abspath(args.bin)
    ws = tempfile.mkdtemp(prefix="loopwright-bench-queue-")
    os.makedirs(os.path.join(ws, ".loopwright/pipelines"))
    with open(os.path.join(ws, ".loopwright/pipelines/q.yml"), "w") as f:
        f.write("name: q\ndescription: d\nversion: 1\nstages:\n"
                "  - {id: s, description: d, agent: shell, mode: agent, run: 'sleep 0.03'}\n")
    d = bench.Daemon(bin_path, ws, ["--max-runs", "4"])

    t0 = time.perf_counter()
    runs = [d.request("POST", "/api/runs", {"pipeline": "q", "task": f"t{i}"})[1]["run_id"] for i in range(args.runs)]
    for run in runs:
        bench.wait_status(d, run)
    wall = time.perf_counter() - t0
    details = [d.request("GET", f"/api/runs/{run}")[1] for run in runs]
    listed = {r["run_id"]: r for r in d.request("GET", f"/api/runs?limit={args.runs}")[1]}
    starts = [when(listed[run]["running_at"]) for run in runs]
    in_order = starts == sorted(starts)
    stages = sum(s["duration_ms"] for r in details for s in r["stages_executed"]) / 1000
    print(f"{args.runs} queued runs on one working tree: {wall * 1000:.0f} ms from the first POST to the last end; "
          f"{stages * 1000:.0f} ms in stages; overhead {(wall - stages) * 1000:.0f} ms "
          f"({(wall - stages) * 1000 / args.runs:.1f} ms per run); started in queue order: {in_order}")

    time.sleep(2)
    before, cpu_before = switches(d.proc.pid), cpu_s(d.proc.pid)
    time.sleep(10)
    woke = (switches(d.proc.pid) - before) / 10
    cpu = (cpu_s(d.proc.pid) - cpu_before) / 10 * 100
    print(f"idle daemon: {woke:.1f} thread wakeups per second, {cpu:.2f} % of a core")
    d.stop()
    subprocess.run(["rm", "-rf", ws])


if __name__ == "__main__":
    main()
