#!/usr/bin/env python3
"""CPU a foreground supervisor spends while its agent is quiet after a signal (issue 24 point 1:
the watcher used to react to the supervisor's own reads of .auto-signal and kept a core busy).
Usage: python3 scripts/bench-auto-idle.py [path/to/loopwright]   (default target/release/loopwright)
Prints the supervisor's CPU ticks (1/100 s) over 10 s; writes nothing outside a temporary folder."""
import json, os, subprocess, sys, tempfile, time
bin = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target/release/loopwright")
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ws = tempfile.mkdtemp()
os.makedirs(f"{ws}/.loopwright/agents")
open(f"{ws}/.loopwright/config.toml","w").write("[auto]\nheartbeat_seconds = 1\nstall_captures = 40\nstop_grace_seconds = 2\n")
subprocess.run([bin,"auto","init","mod","--target","Add a greeting file."],cwd=ws,check=True,capture_output=True)
sig = {"do":"signal","step":"plan","result":"(generated)","next":"check","checkpoint":"post-plan"}
actions=[sig,{"do":"hang","seconds":14},{"do":"idle"}]
json.dump({"task_dir":f"{ws}/mod","log":f"{ws}/agent.log","runs":[actions]},open(f"{ws}/scenario.json","w"))
open(f"{ws}/.loopwright/agents/fake.md","w").write(f'---\nrunner: command\ncommand: ["python3", "{root}/crates/cli/tests/all/fake_agent.py", "{ws}/scenario.json"]\n---\nA.\n')
p = subprocess.Popen([bin,"auto","start","mod","--agent","fake"],cwd=ws,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
time.sleep(4)
def ticks():
    f=open(f"/proc/{p.pid}/stat").read().split(") ")[1].split()
    return int(f[11])+int(f[12])
a=ticks(); time.sleep(10); b=ticks()
print("supervisor CPU ticks in 10 s (after the first signal):", b-a)
subprocess.run([bin,"auto","stop","mod"],cwd=ws,capture_output=True)
try:
    p.wait(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
