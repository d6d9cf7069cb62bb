#!/usr/bin/env python3
"""Workers on PostgreSQL, measured (figures in docs/benchmarks.md).

Run beside a throwaway PostgreSQL, with a release build:

    cargo build --release
    scripts/with-postgres.sh python3 scripts/bench-fleet.py

- claim-to-start latency: one idle worker, then four; 100 runs submitted one at a time (a p99
  of fewer is only the slowest one); from the run's `run_queued` to the worker's `run_resumed`
  (claim, clone brought up to date, worktree made, journal read), and to its first
  `attempt_started`; p50 and p99;
- stages per second with 1, 2 and 3 workers (one slot each) on 30 queued runs of 5 short
  stages (shell, agent mode: each stage commits and pushes);
- an idle worker's CPU (over 20 s) and memory (RSS).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LOOPWRIGHT_BIN", os.path.join(ROOT, "target", "release", "loopwright"))
BASE = os.environ["LOOPWRIGHT_TEST_PG"]
TICK = os.sysconf("SC_CLK_TCK")

PIPELINE = """name: p
description: short stages
version: 1
stages:
""" + "".join(
    f"""  - id: s{i}
    description: d
    agent: shell
    mode: agent
    run: "echo {i} > s{i}.txt"
"""
    for i in range(5)
)


def sh(*args, cwd=None, env=None):
    return subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def database(name):
    name = f"{name}_{os.getpid()}_{int(time.time() * 1000) % 1000000}"
    sh("psql", BASE, "-qAtc", f"CREATE DATABASE {name}")
    return BASE.rsplit("/", 1)[0] + "/" + name


def fleet(tmp):
    remote = os.path.join(tmp, "remote.git")
    sh("git", "init", "-q", "--bare", "-b", "main", remote)
    checkout = os.path.join(tmp, "checkout")
    os.makedirs(os.path.join(checkout, ".loopwright", "pipelines"))
    with open(os.path.join(checkout, ".loopwright", "pipelines", "p.yml"), "w") as f:
        f.write(PIPELINE)
    with open(os.path.join(checkout, ".loopwright", ".gitignore"), "w") as f:
        f.write("state/\n")
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "b"], ["config", "user.email", "b@example.com"],
                 ["add", "-A"], ["commit", "-qm", "initial"], ["remote", "add", "origin", remote],
                 ["push", "-q", "origin", "main"]):
        sh("git", *args, cwd=checkout)
    return checkout


def lw(checkout, url, *args):
    return sh(BIN, *args, "--store", url, cwd=checkout)


def submit(checkout, url):
    return json.loads(lw(checkout, url, "run", "p", "--submit", "--json"))["run_id"]


def worker(tmp, url, n, slots=1):
    env = dict(os.environ, GIT_AUTHOR_NAME="w", GIT_AUTHOR_EMAIL="w@example.com",
               GIT_COMMITTER_NAME="w", GIT_COMMITTER_EMAIL="w@example.com")
    return subprocess.Popen([BIN, "worker", "--store", url, "--slots", str(slots), "--cache", os.path.join(tmp, f"cache-{n}"),
                             "--repo", os.path.join(tmp, "remote.git")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def journal(checkout, url, run):
    out = lw(checkout, url, "logs", run, "--json")
    return [json.loads(line) for line in out.splitlines()]


def at(entry):
    # RFC 3339 with up to nanoseconds, in UTC: seconds since the epoch.
    text = entry["at"].rstrip("Z")
    whole, _, frac = text.partition(".")
    t = time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone
    return t + float("0." + (frac or "0"))


def wait_ended(checkout, url, runs, limit=600):
    deadline = time.time() + limit
    while time.time() < deadline:
        listed = json.loads(lw(checkout, url, "status", "--json", "--limit", str(max(50, len(runs) + 10))))
        status = {r["run_id"]: r["status"] for r in listed}
        if all(status.get(r) in ("success", "failed", "cancelled") for r in runs):
            return status
        time.sleep(0.05)
    raise SystemExit(f"runs did not end within {limit} s")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def claim_latency(n=100, workers=1):
    with tempfile.TemporaryDirectory() as tmp:
        url = database("claim")
        checkout = fleet(tmp)
        ws = [worker(tmp, url, i) for i in range(workers)]
        time.sleep(1.5)
        to_start, to_attempt = [], []
        try:
            for _ in range(n):
                run = submit(checkout, url)
                wait_ended(checkout, url, [run])
                events = journal(checkout, url, run)
                queued = next(at(e) for e in events if e["event"]["type"] == "run_queued")
                resumed = next(at(e) for e in events if e["event"]["type"] == "run_resumed")
                attempt = next(at(e) for e in events if e["event"]["type"] == "attempt_started")
                to_start.append((resumed - queued) * 1000)
                to_attempt.append((attempt - queued) * 1000)
        finally:
            for w in ws:
                w.terminate()
            for w in ws:
                w.wait()
        return to_start, to_attempt


def throughput(workers, runs=30):
    with tempfile.TemporaryDirectory() as tmp:
        url = database(f"tp{workers}")
        checkout = fleet(tmp)
        ids = [submit(checkout, url) for _ in range(runs)]
        procs = [worker(tmp, url, n) for n in range(workers)]
        try:
            wait_ended(checkout, url, ids)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait()
        first, last = None, None
        for run in ids:
            events = journal(checkout, url, run)
            start = next(at(e) for e in events if e["event"]["type"] == "run_resumed")
            end = max(at(e) for e in events)
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
        return runs * 5 / (last - first), last - first


def idle_worker(seconds=20):
    with tempfile.TemporaryDirectory() as tmp:
        url = database("idle")
        fleet(tmp)
        w = worker(tmp, url, 1)
        time.sleep(3)

        def cpu():
            fields = open(f"/proc/{w.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICK

        before, t0 = cpu(), time.time()
        time.sleep(seconds)
        used, span = cpu() - before, time.time() - t0
        rss = next(int(line.split()[1]) for line in open(f"/proc/{w.pid}/status") if line.startswith("VmRSS"))
        w.terminate()
        w.wait()
        return used / span * 100, rss / 1024


def main():
    if not os.path.exists(BIN):
        sys.exit("build it first: cargo build --release")
    for workers in (1, 4):
        to_start, to_attempt = claim_latency(workers=workers)
        print(f"claim to start (run_queued -> run_resumed), {len(to_start)} runs, {workers} worker(s): "
              f"p50 {statistics.median(to_start):.0f} ms, p99 {percentile(to_start, 99):.0f} ms; "
              f"to the first attempt: p50 {statistics.median(to_attempt):.0f} ms, p99 {percentile(to_attempt, 99):.0f} ms")
    for n in (1, 2, 3):
        rate, span = throughput(n)
        print(f"{n} worker(s), 30 runs x 5 stages: {rate:.1f} stages/s ({span:.1f} s)")
    cpu, rss = idle_worker()
    print(f"idle worker: {cpu:.2f} % of a core over 20 s, RSS {rss:.1f} MB")


if __name__ == "__main__":
    main()
