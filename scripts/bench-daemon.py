#!/usr/bin/env python3
"""The daemon's benchmarks (docs/benchmarks.md, "The daemon"), on the machine it runs on.

    cargo build --release && python3 scripts/bench-daemon.py [--runs 1000] [--bin target/release/loopwright]

Needs `hey` (Debian) for the steady load. Measures, in a fresh workspace:
  1. start to serving (spawn -> first 200 from /api/health) and idle RSS;
  2. with N runs in the store: GET /api/runs/{run} and GET /api/runs at 500 requests/s from a
     second process (hey: 5 workers x 100/s, 10 s, keep-alive), p50/p99;
  3. journal commit -> SSE event received (the event's own `at` against the client's clock, same
     machine), for a run the daemon drives and for one a CLI process drives;
  4. 200 SSE clients on one run: daemon RSS before/after, and whether every client got every event,
     then the daemon's RSS after --idle seconds (default 60) with nothing to do;
  5. a 1000-stage chain started through the API against the same started by `loopwright run`.
"""
import argparse
import datetime
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_parts(pid):
    """RSS split: what the process allocated (anonymous) and the pages of its binary and
    libraries it touched (file-backed: clean, shared, given back by the kernel on demand)."""
    return (f"anonymous {rss_kb(pid, 'RssAnon') / 1024:.1f} MB, "
            f"file-backed {rss_kb(pid, 'RssFile') / 1024:.1f} MB")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Daemon:
    def __init__(self, bin_path, ws, extra=()):
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([bin_path, "serve", "--addr", "127.0.0.1:0", "--json", *extra], cwd=ws,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started = json.loads(self.proc.stdout.readline())
        self.host, port = started["addr"].rsplit(":", 1)
        self.port = int(port)
        self.token = open(os.path.join(ws, ".loopwright/state/serve.token")).read().strip()
        while True:
            try:
                if self.request("GET", "/api/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.001)
        self.start_ms = (time.perf_counter() - t0) * 1000

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, (json.loads(data) if data else None)

    def stream(self, path):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"})
        return conn, conn.getresponse()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def sse_frames(response):
    """(event, data) per frame until `end`."""
    event, data = None, None
    while True:
        line = response.fp.readline()
        if not line:
            return
        line = line.decode().rstrip("\n")
        if line == "":
            if event:
                yield event, data
                if event == "end":
                    return
            event, data = None, None
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]


def pipeline(ws, name, stages, command):
    body = "".join(f"  - id: s{i}\n    agent: shell\n    mode: plan\n    description: d\n    run: \"{command}\"\n"
                   for i in range(1, stages + 1))
    os.makedirs(os.path.join(ws, ".loopwright/pipelines"), exist_ok=True)
    with open(os.path.join(ws, f".loopwright/pipelines/{name}.yml"), "w") as f:
        f.write(f"name: {name}\ndescription: d\nversion: 1\nstages:\n{body}")


def wait_status(d, run, statuses=("success", "failed", "cancelled")):
    """Waits for the run's end on its event stream, as a client should: polling its status
    would fold the whole journal of a long run again and again, and load the machine whose
    speed is being measured."""
    conn, response = d.stream(f"/api/runs/{run}/events")
    for _ in sse_frames(response):
        pass
    conn.close()
    status = d.request("GET", f"/api/runs/{run}")[1]["status"]
    assert status in statuses, status
    return status


def hey(d, path, seconds=10):
    out = subprocess.run(["hey", "-z", f"{seconds}s", "-c", "5", "-q", "100", "-H", f"Authorization: Bearer {d.token}",
                          f"http://{d.host}:{d.port}{path}"], capture_output=True, text=True).stdout
    figures = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Requests/sec:"):
            figures["rps"] = float(line.split()[1])
        for p in ("50%", "99%"):
            if line.startswith(f"{p} in "):
                figures[p] = float(line.split()[2]) * 1000
        if line.startswith("[200]"):
            figures["ok"] = int(line.split()[1])
    return figures


def latency_of(d, run, events_wanted):
    """Commit -> receipt latency (ms) of a run's events as a stream delivers them live."""
    conn, response = d.stream(f"/api/runs/{run}/events")
    lags = []
    kinds = []
    for event, data in sse_frames(response):
        received = datetime.datetime.now(datetime.timezone.utc)
        if event == "end":
            break
        at = datetime.datetime.fromisoformat(json.loads(data)["at"].replace("Z", "+00:00"))
        lags.append((received - at).total_seconds() * 1000)
        kinds.append(event)
        if len(lags) >= events_wanted:
            break
    conn.close()
    slowest = sorted(zip(lags, kinds), reverse=True)[:3]
    print("  slowest: " + ", ".join(f"{kind} {lag:.1f} ms" for lag, kind in slowest))
    return lags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/loopwright")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=60)
    args = ap.parse_args()
    bin_path = os.path.abspath(args.bin)
    ws = tempfile.mkdtemp(prefix="loopwright-bench-daemon-")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=ws, check=True)
    pipeline(ws, "one", 1, "true")
    pipeline(ws, "slow", 20, "sleep 0.05")
    pipeline(ws, "chain", 1000, "true")

    d = Daemon(bin_path, ws)
    print(f"start to serving: {d.start_ms:.1f} ms; idle RSS {rss_kb(d.proc.pid) / 1024:.1f} MB (empty store; "
          f"{rss_parts(d.proc.pid)})")

    t0 = time.perf_counter()
    runs = [d.request("POST", "/api/runs", {"pipeline": "one"})[1]["run_id"] for _ in range(args.runs)]
    wait_status(d, runs[-1])
    print(f"{args.runs} one-stage runs through the API: {time.perf_counter() - t0:.1f} s; "
          f"RSS {rss_kb(d.proc.pid) / 1024:.1f} MB")
    d.stop()
    d = Daemon(bin_path, ws)
    print(f"restart with {args.runs} runs: start to serving {d.start_ms:.1f} ms; idle RSS {rss_kb(d.proc.pid) / 1024:.1f} MB")

    middle = runs[len(runs) // 2]
    for path in (f"/api/runs/{middle}", "/api/runs"):
        f = hey(d, path)
        print(f"GET {path}: {f.get('rps', 0):.0f} req/s, p50 {f.get('50%', 0):.2f} ms, p99 {f.get('99%', 0):.2f} ms, "
              f"{f.get('ok', 0)} x 200")

    # Commit -> SSE, daemon-owned.
    run = d.request("POST", "/api/runs", {"pipeline": "slow"})[1]["run_id"]
    lags = latency_of(d, run, 10_000)
    print(f"commit -> SSE, daemon-owned run: {len(lags)} events, p50 {pct(lags, 50):.1f} ms, p99 {pct(lags, 99):.1f} ms")
    # CLI-owned: the stream follows the journal a CLI process writes.
    cli = subprocess.Popen([bin_path, "run", "slow", "-q"], cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        latest = d.request("GET", "/api/runs?limit=1")[1]
        if latest and latest[0]["run_id"] != run:
            break
        time.sleep(0.005)
    lags = latency_of(d, latest[0]["run_id"], 10_000)
    cli.wait()
    print(f"commit -> SSE, CLI-owned run: {len(lags)} events, p50 {pct(lags, 50):.1f} ms, p99 {pct(lags, 99):.1f} ms")

    # 200 SSE clients on one run.
    before = rss_kb(d.proc.pid)
    run = d.request("POST", "/api/runs", {"pipeline": "slow"})[1]["run_id"]
    counts = [0] * 200
    peak = [before]

    def client(i):
        conn, response = d.stream(f"/api/runs/{run}/events")
        for event, _ in sse_frames(response):
            if event != "end":
                counts[i] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak[0] = max(peak[0], rss_kb(d.proc.pid))
        time.sleep(0.05)
    journal = len(d.request("GET", f"/api/runs/{run}/events")[1])
    print(f"200 SSE clients on one run: RSS {before / 1024:.1f} -> peak {peak[0] / 1024:.1f} MB; "
          f"every client got all {journal} events: {all(c == journal for c in counts)}")
    time.sleep(args.idle)
    print(f"after {args.idle} s idle: RSS {rss_kb(d.proc.pid) / 1024:.1f} MB ({rss_parts(d.proc.pid)})")

    # The 1000-stage chain: API against CLI.
    t0 = time.perf_counter()
    run = d.request("POST", "/api/runs", {"pipeline": "chain"})[1]["run_id"]
    wait_status(d, run)
    api_s = time.perf_counter() - t0
    d.stop()
    t0 = time.perf_counter()
    subprocess.run([bin_path, "run", "chain", "-q"], cwd=ws, check=True, stdout=subprocess.DEVNULL)
    cli_s = time.perf_counter() - t0
    print(f"1000-stage chain: through the API {api_s:.2f} s ({api_s:.2f} ms/stage), "
          f"by the CLI {cli_s:.2f} s ({cli_s:.2f} ms/stage)")
    subprocess.run(["rm", "-rf", ws])


if __name__ == "__main__":
    main()
