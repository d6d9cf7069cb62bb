#!/usr/bin/env python3
"""Auto mode's benchmarks (docs/benchmarks.md, "Auto mode"), on the machine it runs on.

    cargo build --release && python3 scripts/bench-auto.py [--bin target/release/loopwright] [--seconds 60]

The agent is the scripted interactive agent of the tests (crates/cli/tests/all/fake_agent.py)
in a real pseudo-terminal. Measures:
  1. supervision cost of one session at a 1 s heartbeat while the agent redraws a spinner ten
     times a second: CPU and RSS of the supervisor (a foreground `auto start`) and of the holder;
  2. detection latency at a 1 s heartbeat: permission prompt -> answer typed, quota message ->
     quota wait journaled, exit -> exit journaled (the agent's clock against the journal's,
     same machine);
  3. 20 sessions supervised by one daemon, each agent spinning and asking a prompt every 15 s:
     the daemon's CPU and RSS, the holders', and the prompt latency under that load.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

from auto_cpu import holders, ticks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT = os.path.join(ROOT, "crates/cli/tests/all/fake_agent.py")
TICK = os.sysconf("SC_CLK_TCK")
PROMPT = ("● Write(plan.md)\n Create file\n plan.md\n Do you want to create plan.md?\n ❯ 1. Yes\n"
          "   2. Yes, allow all edits during this session (shift+tab)\n   3. No\n\n Esc to cancel · Tab to amend\n")
QUOTA = ("■ You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again in "
         "{seconds} seconds.")


def cpu_s(pid):
    return ticks(pid) / TICK


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(p))
        except OSError:
            pass
    return out


def workspace(modules, runs, heartbeat, extra=""):
    ws = tempfile.mkdtemp(prefix="lw-bench-auto-")
    os.makedirs(os.path.join(ws, ".loopwright/agents"))
    with open(os.path.join(ws, ".loopwright/config.toml"), "w") as f:
        f.write(f"[auto]\nheartbeat_seconds = {heartbeat}\nstall_captures = 30\nquota_jitter_seconds = 0.2\n"
                f"restarts = 20\nrecoveries_total = 1000\nrecoveries_per_iteration = 1000\n{extra}")
    for m in modules:
        subprocess.run([BIN, "auto", "init", m, "--target", "Benchmark."], cwd=ws, check=True, capture_output=True)
        scenario = {"task_dir": os.path.join(ws, m), "log": os.path.join(ws, f"{m}.agent.log"), "runs": runs}
        with open(os.path.join(ws, f"{m}.json"), "w") as f:
            json.dump(scenario, f)
        with open(os.path.join(ws, f".loopwright/agents/{m}.md"), "w") as f:
            f.write(f'---\nrunner: command\ncommand: ["python3", "{AGENT}", "{os.path.join(ws, m + ".json")}"]\n---\nBench.\n')
    return ws


def agent_log(ws, m):
    try:
        return [json.loads(l) for l in open(os.path.join(ws, f"{m}.agent.log"))]
    except OSError:
        return []


def journal(ws, m):
    out = subprocess.run([BIN, "auto", "log", m, "--json"], cwd=ws, capture_output=True, text=True)
    try:
        return json.loads(out.stdout)["entries"]
    except ValueError:
        return []


def ts(text):
    # Journal times are RFC 3339 UTC with nanoseconds.
    import datetime
    text = text.rstrip("Z")
    if "." in text:
        head, frac = text.split(".")
        text = f"{head}.{frac[:6]}"
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.timezone.utc).timestamp()


def stop(ws, m, proc=None):
    subprocess.run([BIN, "auto", "stop", m], cwd=ws, capture_output=True)
    if proc:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def cost(seconds):
    """1. One session, 1 s heartbeat, a spinner redrawn ten times a second."""
    ws = workspace(["busy"], [[{"do": "spin", "seconds": seconds + 60}]], 1)
    sup = subprocess.Popen([BIN, "auto", "start", "busy", "--agent", "busy"], cwd=ws,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(5)
    [holder] = holders(ws)
    s0, h0, t0 = cpu_s(sup.pid), cpu_s(holder), time.time()
    rss_s, rss_h = [], []
    while time.time() - t0 < seconds:
        time.sleep(1)
        rss_s.append(rss_mb(sup.pid))
        rss_h.append(rss_mb(holder))
    wall = time.time() - t0
    s1, h1 = cpu_s(sup.pid), cpu_s(holder)
    stop(ws, "busy", sup)
    return {
        "seconds": round(wall, 1),
        "supervisor_cpu_pct": round((s1 - s0) / wall * 100, 2),
        "supervisor_rss_mb": round(max(rss_s), 1),
        "holder_cpu_pct": round((h1 - h0) / wall * 100, 2),
        "holder_rss_mb": round(max(rss_h), 1),
    }


def latency(rounds):
    """2. Prompt -> answer, quota -> wait, exit -> journaled, at a 1 s heartbeat."""
    first = []
    for _ in range(rounds):
        first += [{"do": "spin", "seconds": 1.3}, {"do": "prompt", "name": "edit", "text": PROMPT, "expect": "1"}]
    for _ in range(3):
        first += [{"do": "spin", "seconds": 1.3}, {"do": "quota", "text": QUOTA, "in_seconds": 3}]
    first += [{"do": "spin", "seconds": 1.1}, {"do": "exit", "code": 0}]
    runs = [first] + [[{"do": "spin", "seconds": 1.1 + 0.1 * i}, {"do": "exit", "code": 0}] for i in range(rounds - 1)]
    runs.append([{"do": "idle"}])
    ws = workspace(["lat"], runs, 1)
    sup = subprocess.Popen([BIN, "auto", "start", "lat", "--agent", "lat"], cwd=ws,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline:
        starts = [e for e in agent_log(ws, "lat") if e["kind"] == "started"]
        if len(starts) >= len(runs):
            break
        time.sleep(1)
    log, entries = agent_log(ws, "lat"), journal(ws, "lat")
    stop(ws, "lat", sup)
    prompts, answers = [], []
    for e in log:
        if e["kind"] == "action" and e["do"] == "prompt":
            prompts.append(e["at"])
        if e["kind"] == "answer":
            answers.append(e["at"])
    prompt_lat = [a - p for p, a in zip(prompts, answers)]
    quota_printed = [e["at"] for e in log if e["kind"] == "action" and e["do"] == "quota"]
    quota_seen = [ts(e["at"]) for e in entries if e["kind"] == "quota_wait"]
    quota_lat = [s - p for p, s in zip(quota_printed, quota_seen)]
    exits = [e["at"] for e in log if e["kind"] == "exit"]
    exited = [ts(e["at"]) for e in entries if e["kind"] == "exited"]
    exit_lat = [s - p for p, s in zip(exits, exited)]
    summary = lambda xs: {"n": len(xs), "median_s": round(statistics.median(xs), 2) if xs else None,
                          "max_s": round(max(xs), 2) if xs else None}
    return {"prompt": summary(prompt_lat), "quota": summary(quota_lat), "exit": summary(exit_lat)}


def many(sessions, seconds):
    """3. N sessions under one daemon, each agent spinning and asking every 15 s."""
    names = [f"s{i:02d}" for i in range(sessions)]
    cycle = []
    for _ in range(int(seconds / 15) + 2):
        cycle += [{"do": "spin", "seconds": 15}, {"do": "prompt", "name": "edit", "text": PROMPT, "expect": "1"}]
    ws = workspace(names, [cycle], 1, "stop_grace_seconds = 3\n")
    daemon = subprocess.Popen([BIN, "serve", "--addr", "127.0.0.1:0", "--json"], cwd=ws,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    addr = json.loads(daemon.stdout.readline())["addr"]
    token = open(os.path.join(ws, ".loopwright/state/serve.token")).read().strip()
    rss0 = rss_mb(daemon.pid)
    started = time.time()
    for n in names:
        req = urllib.request.Request(f"http://{addr}/api/sessions/{n}/task-auto", method="POST",
                                     data=json.dumps({"taskDir": n, "agent": n}).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        urllib.request.urlopen(req).read()
    start_all = time.time() - started
    time.sleep(5)
    hs = holders(ws)
    d0, h0, t0 = cpu_s(daemon.pid), sum(cpu_s(h) for h in hs), time.time()
    agents = [c for h in hs for c in children(h)]
    a0 = sum(cpu_s(a) for a in agents)
    peak = 0.0
    while time.time() - t0 < seconds:
        time.sleep(1)
        peak = max(peak, rss_mb(daemon.pid))
    wall = time.time() - t0
    d1, h1, a1 = cpu_s(daemon.pid), sum(cpu_s(h) for h in hs), sum(cpu_s(a) for a in agents)
    holder_rss = sum(rss_mb(h) for h in hs)
    lat = []
    for n in names:
        log = agent_log(ws, n)
        prompts = [e["at"] for e in log if e["kind"] == "action" and e["do"] == "prompt"]
        answers = [e["at"] for e in log if e["kind"] == "answer"]
        lat += [a - p for p, a in zip(prompts, answers)]
    for n in names:
        req = urllib.request.Request(f"http://{addr}/api/sessions/{n}/task-auto", method="DELETE",
                                     headers={"Authorization": f"Bearer {token}"})
        urllib.request.urlopen(req).read()
    time.sleep(8)
    running = 0
    for n in names:
        req = urllib.request.Request(f"http://{addr}/api/sessions/{n}/task-auto", headers={"Authorization": f"Bearer {token}"})
        running += json.loads(urllib.request.urlopen(req).read())["status"] == "running"
    daemon.terminate()
    daemon.wait(30)
    return {
        "sessions": sessions,
        "seconds": round(wall, 1),
        "start_all_s": round(start_all, 2),
        "daemon_cpu_pct": round((d1 - d0) / wall * 100, 1),
        "daemon_rss_mb": {"idle": round(rss0, 1), "peak": round(peak, 1)},
        "holders_cpu_pct": round((h1 - h0) / wall * 100, 1),
        "holders_rss_mb": round(holder_rss, 1),
        "agents_cpu_pct": round((a1 - a0) / wall * 100, 1),
        "prompt_latency": {"n": len(lat), "median_s": round(statistics.median(lat), 2) if lat else None,
                           "p90_s": round(sorted(lat)[int(len(lat) * 0.9)], 2) if lat else None,
                           "max_s": round(max(lat), 2) if lat else None},
        "still_running_after_stop": running,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.path.join(ROOT, "target/release/loopwright"))
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--only", choices=["cost", "latency", "many"])
    args = parser.parse_args()
    BIN = os.path.abspath(args.bin)
    results = {}
    if args.only in (None, "cost"):
        results["cost"] = cost(args.seconds)
        print(json.dumps({"cost": results["cost"]}), flush=True)
    if args.only in (None, "latency"):
        results["latency"] = latency(args.rounds)
        print(json.dumps({"latency": results["latency"]}), flush=True)
    if args.only in (None, "many"):
        results["many"] = many(args.sessions, args.seconds)
        print(json.dumps({"many": results["many"]}), flush=True)
