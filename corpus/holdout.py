#!/usr/bin/env python3
# Writes the held-out tool list of corpus/holdout.txt from corpus/samples.tsv: python3 corpus/holdout.py corpus/samples.tsv
# Chooses the held-out tools: at least a quarter of every category's tools, preferring tools
# the library was never tuned on (not in the corpus before issue 13), in a fixed order (sha1).
import csv, hashlib, math, collections, sys
old = set("cargo python3 pytest mypy ruff black gcc javac node flake8 pip tsc eslint prettier g++ go junit clang jest vitest npm sh dd curl timeout git make".split())
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by_cat = collections.defaultdict(set)
for r in rows:
    by_cat[r["file"].split("/")[0]].add(r["tool"])
order = lambda t: (t in old, hashlib.sha1(t.encode()).hexdigest())
held = set()
for cat in sorted(by_cat, key=lambda c: len(by_cat[c])):
    tools = by_cat[cat]
    need = math.ceil(len(tools) / 4)
    for t in sorted(tools, key=order):
        if len(tools & held) >= need:
            break
        held.add(t)
for cat in sorted(by_cat):
    tools = by_cat[cat]
    print(f"# {cat}: {len(tools & held)}/{len(tools)} held out", file=sys.stderr)
print("\n".join(sorted(held)))
