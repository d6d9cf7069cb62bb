#!/usr/bin/env python3
"""Stages at once (SPEC §16): what running a graph costs and saves, through `loopwright run`.

1. A diamond whose two branches each sleep 1 s, against the same four stages in a line.
2. loopwright's own cost per stage in a graph: N `true` stages chained by explicit `needs:`
   (the graph driver, one stage at a time) against the same N as a line (the line driver),
   and N independent `true` stages run four at a time.
3. Branches in the sandbox: 1, 2 and 4 agent-mode stages that each sleep 1 s in a layer of
   their own, run at once (wall time and peak memory of the run).
4. Best of N in the sandbox: one agent-mode stage whose agent sleeps 1 s, as a plain stage
   (N = 1) and with `candidates:` of 2 and 4, each candidate checked by one command.

Usage: python3 scripts/bench-graph.py --bin target/release/loopwright [--stages 200] [--rounds 5]
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time


def pipeline(name, stages, max_parallel=None):
    head = f"name: {name}\ndescription: bench\nversion: 1\n"
    if max_parallel:
        head += f"max_parallel: {max_parallel}\n"
    body = "stages:\n"
    for s in stages:
        body += f"  - id: {s['id']}\n    description: x\n    agent: shell\n    mode: {s.get('mode', 'plan')}\n"
        if "needs" in s:
            body += f"    needs: [{', '.join(s['needs'])}]\n"
        body += f"    run: {s['run']}\n"
    return head + body


def run_once(binary, text, sandbox, agents=None):
    """One `loopwright run p` in a fresh workspace: wall time, this run's peak memory (MiB)."""
    with tempfile.TemporaryDirectory() as ws:
        os.makedirs(f"{ws}/.loopwright/pipelines")
        os.makedirs(f"{ws}/.loopwright/agents")
        with open(f"{ws}/.loopwright/config.toml", "w") as f:
            f.write(f'sandbox = "{sandbox}"\n')
        for name, body in (agents or {}).items():
            with open(f"{ws}/.loopwright/agents/{name}.md", "w") as f:
                f.write(body)
        with open(f"{ws}/.loopwright/pipelines/p.yml", "w") as f:
            f.write(text)
        start = time.perf_counter()
        child = subprocess.Popen([binary, "run", "p", "--quiet"], cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = child.stderr.read()
        # This run's own peak memory (not the largest child's so far).
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"run failed: {err.decode()[-2000:]}")
        return wall, usage.ru_maxrss / 1024


def measure(binary, text, rounds, sandbox="off", agents=None):
    walls, rss = [], []
    for _ in range(rounds):
        wall, peak = run_once(binary, text, sandbox, agents)
        walls.append(wall)
        rss.append(peak)
    return statistics.median(walls), min(walls), max(rss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stages", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    b = os.path.abspath(args.bin)

    print("## 1. a diamond whose branches sleep 1 s")
    line = [{"id": "a", "run": "'true'"}, {"id": "b", "run": "sleep 1"}, {"id": "c", "run": "sleep 1"}, {"id": "d", "run": "'true'"}]
    diamond = [
        {"id": "a", "run": "'true'"},
        {"id": "b", "run": "sleep 1", "needs": ["a"]},
        {"id": "c", "run": "sleep 1", "needs": ["a"]},
        {"id": "d", "run": "'true'", "needs": ["b", "c"]},
    ]
    for label, stages in (("line", line), ("diamond", diamond)):
        med, best, _ = measure(b, pipeline("p", stages), args.rounds)
        print(f"{label:8} median {med:.3f} s  fastest {best:.3f} s")

    n = args.stages
    print(f"\n## 2. loopwright's own cost per stage ({n} `true` stages)")
    chain_line = [{"id": f"s{i}", "run": "'true'"} for i in range(n)]
    chain_graph = [{"id": f"s{i}", "run": "'true'", **({"needs": [f"s{i-1}"]} if i else {"needs": []})} for i in range(n)]
    fan = [{"id": f"s{i}", "run": "'true'", "needs": []} for i in range(n)]
    results = {}
    for label, stages, par in (("line", chain_line, None), ("graph, chained", chain_graph, None), ("graph, 4 at once", fan, 4)):
        med, best, rss = measure(b, pipeline("p", stages, par), args.rounds)
        results[label] = best
        print(f"{label:18} median {med:.3f} s  fastest {best:.3f} s  per stage {1000 * best / n:.2f} ms  peak {rss:.1f} MiB")
    print(f"graph driver over the line driver: {1000 * (results['graph, chained'] - results['line']) / n:+.2f} ms per stage")

    print("\n## 3. agent-mode branches in the sandbox, each in its layer, sleeping 1 s")
    base = None
    for width in (1, 2, 4):
        stages = [{"id": f"w{i}", "run": "sleep 1", "mode": "agent", "needs": []} for i in range(width)]
        try:
            med, best, rss = measure(b, pipeline("p", stages, 4), args.rounds, sandbox="required")
        except SystemExit as e:
            print(f"no sandbox here: {e}")
            return
        base = base or best
        print(f"{width} at once: median {med:.3f} s  fastest {best:.3f} s  ({best / base:.2f}x of one)  peak {rss:.1f} MiB")

    print("\n## 4. best of N in the sandbox (the agent sleeps 1 s; one check)")
    base = None
    for n in (1, 2, 4):
        med, best, rss = measure_candidates(b, n, args.rounds)
        base = base or best
        print(f"N = {n}: median {med:.3f} s  fastest {best:.3f} s  ({best / base:.2f}x of N = 1)  peak {rss:.1f} MiB")


def measure_candidates(binary, n, rounds):
    agent = "---\nname: sleeper\nrunner: command\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; sleep 1; echo 42 > answer.txt\"]\n---\nYou answer.\n"
    stage = "  - id: pick\n    description: answer\n    agent: sleeper\n    mode: agent\n"
    if n > 1:
        stage += f"    candidates: {{count: {n}}}\n"
    stage += "    checks:\n      - name: answer\n        type: test\n        command: grep -qx 42 answer.txt\n"
    text = "name: p\ndescription: bench\nversion: 1\nstages:\n" + stage
    return measure(binary, text, rounds, sandbox="required", agents={"sleeper": agent})


if __name__ == "__main__":
    main()
