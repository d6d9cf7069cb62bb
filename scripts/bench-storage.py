#!/usr/bin/env python3
"""Disk per run (docs/benchmarks.md, "Storage"), on the machine it runs on.

    cargo build --release && python3 scripts/bench-storage.py [--bin target/release/loopwright] [--runs 20] [--mb 1]

A git workspace with an untracked data file of --mb MB, snapshots taken without a sandbox
(`sandbox = "off"`), and a one-stage plan-mode pipeline (plan mode snapshots the files and
git's and loopwright's own). It runs the pipeline --runs times and prints what each run adds
under .loopwright/state/ (the bytes files hold, not the blocks they take), and what
`loopwright gc` frees with `[retention] snapshots_days = 0` when the binary has it.
"""
import argparse
import json
import os
import subprocess
import tempfile


def size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/loopwright")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--mb", type=int, default=1)
    a = p.parse_args()
    binary = os.path.abspath(a.bin)
    with tempfile.TemporaryDirectory() as ws:
        os.makedirs(f"{ws}/.loopwright/pipelines")
        os.makedirs(f"{ws}/data")
        # A binary older than `gc` does not know [retention] (it is measured as it was).
        has_gc = subprocess.run([binary, "gc", "--help"], capture_output=True).returncode == 0
        with open(f"{ws}/.loopwright/config.toml", "w") as f:
            f.write('sandbox = "off"\n' + ('\n[retention]\nsnapshots_days = 0\n' if has_gc else ''))
        with open(f"{ws}/.loopwright/pipelines/look.yml", "w") as f:
            f.write("name: look\ndescription: d\nversion: 1\nstages:\n  - id: read\n    agent: shell\n"
                    "    mode: plan\n    description: d\n    run: cat app.txt\n")
        with open(f"{ws}/app.txt", "w") as f:
            f.write("version 1\n")
        with open(f"{ws}/data/big.bin", "wb") as f:
            f.write(b"x" * (a.mb << 20))
        git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
        subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
        subprocess.run(git + ["add", "app.txt", ".loopwright"], cwd=ws, check=True)
        subprocess.run(git + ["commit", "-qm", "initial"], cwd=ws, check=True)
        state = f"{ws}/.loopwright/state"

        def run():
            subprocess.run([binary, "run", "look", "--quiet"], cwd=ws, check=True, stdout=subprocess.DEVNULL)

        run()
        first = size(state)
        for _ in range(a.runs):
            run()
        per = (size(state) - first) / a.runs
        print(f"{binary}: first run {first / 1024:.0f} KB under state/, then {per / 1024:.1f} KB per run "
              f"({a.runs} runs, {a.mb} MB untracked)")
        gc = subprocess.run([binary, "gc", "--json"], cwd=ws, capture_output=True, text=True) if has_gc else None
        if gc is not None and gc.returncode == 0:
            freed = json.loads(gc.stdout)
            print(f"  gc (snapshots_days = 0): freed {freed['bytes'] / 1024:.0f} KB of {len(freed['runs'])} runs "
                  f"and {freed['objects']} copies; state/ is now {size(state) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
