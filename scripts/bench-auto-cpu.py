#!/usr/bin/env python3
"""CPU that loopwright itself spends supervising auto loops under `loopwright serve` (issue 24
point 3): the daemon alone and idle, then with 1 and with 20 loops whose agents work (a spinner
redrawn ten times a second, as Claude Code's is) or sit quiet at their prompt. Counted: the
daemon and each loop's PTY holder (`loopwright auto hold`), not the agents. Default settings
(a 60 s heartbeat).

Usage: python3 scripts/bench-auto-cpu.py [path/to/loopwright] [seconds]
       (default target/release/loopwright, 20 s per measurement)
Prints one line per case: % of one core in all, and per loop. Writes only under a temporary
folder, and stops everything it started."""
import json, os, subprocess, sys, tempfile, time, urllib.request

from auto_cpu import holders, ticks

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
bin = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "target/release/loopwright")
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
hz = os.sysconf("SC_CLK_TCK")


def case(name, loops, spinning):
    ws = tempfile.mkdtemp(prefix="lw-bench-auto-")
    os.makedirs(f"{ws}/.loopwright/agents")
    open(f"{ws}/.loopwright/config.toml", "w").write("[auto]\nstall_captures = 1000\n")
    work = {"do": "spin", "seconds": 3600} if spinning else {"do": "idle", "seconds": 3600}
    json.dump({"task_dir": f"{ws}/m0", "log": f"{ws}/agent.log", "runs": [[work]]}, open(f"{ws}/scenario.json", "w"))
    open(f"{ws}/.loopwright/agents/fake.md", "w").write(
        f'---\nrunner: command\ncommand: ["python3", "{root}/crates/cli/tests/all/fake_agent.py", "{ws}/scenario.json"]\n---\nA.\n'
    )
    for i in range(loops):
        subprocess.run([bin, "auto", "init", f"m{i}", "--target", "Add a greeting file."], cwd=ws, check=True, capture_output=True)
    daemon = subprocess.Popen([bin, "serve", "--addr", "127.0.0.1:0", "--json"], cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    info = json.loads(daemon.stdout.readline())
    url, token = info["url"].split("?")[0].rstrip("/"), open(f"{ws}/.loopwright/state/serve.token").read().strip()
    for i in range(loops):
        req = urllib.request.Request(f"{url}/api/sessions/s{i}/task-auto", data=json.dumps({"taskDir": f"m{i}", "agent": "fake"}).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req).read()
    time.sleep(5)
    pids = [daemon.pid] + holders(ws)
    before = sum(ticks(p) for p in pids)
    time.sleep(seconds)
    spent = sum(ticks(p) for p in pids) - before
    share = 100.0 * spent / hz / seconds
    per = f", {share / loops:.2f} % per loop" if loops else ""
    print(f"{name}: {share:.2f} % of one core{per} ({spent} ticks in {seconds:.0f} s, {len(pids) - 1} holders)")
    daemon.terminate()
    try:
        daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
    subprocess.run(["pkill", "-f", f"{ws}/scenario.json"], capture_output=True)
    for p in holders(ws):
        try:
            os.kill(p, 9)
        except OSError:
            pass


case("idle daemon, no loop", 0, False)
case("1 loop, agent working (spinner)", 1, True)
case("1 loop, agent quiet at its prompt", 1, False)
case("20 loops, agents working", 20, True)
case("20 loops, agents quiet", 20, False)
