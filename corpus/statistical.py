#!/usr/bin/env python3
"""Tries issue 13's optional statistical fallback on the corpus, and prints its figures.

A naive Bayes classifier over an output's words (3+ letters, lowercased), the tool and the
check type, trained on the tuned tools' samples only (corpus/holdout.txt), is asked to
propose a category where the pattern library matches nothing. Figures:

- leave-one-tool-out over the tuned tools: how often the classifier alone is right, by its
  raw posterior (its calibration), and what it does to the tuned tools' clean outputs;
- the held-out tools: failures right with the library alone and with the fallback, and
  clean outputs still matched by nothing, at several posterior thresholds.

The library's answers come from the binary: `python3 corpus/statistical.py target/debug/loopwright`
(build it first). docs/classification.md says what was decided from these figures.
"""
import collections, csv, json, math, os, re, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "target", "debug", "loopwright")
held_tools = {l.strip() for l in open(os.path.join(here, "holdout.txt")) if l.strip() and not l.startswith("#")}
rows = list(csv.reader(open(os.path.join(here, "samples.tsv")), delimiter="\t"))
WORD = re.compile(r"[A-Za-z][A-Za-z_]{2,}")

samples = []
for r in rows[1:]:
    d = dict(zip(rows[0], r))
    path = os.path.join(here, d["file"] + ".txt")
    args = [binary, "patterns", "test", path, "--json", "--command", d["command"],
            "--check-type", d["check_type"], "--exit-code", d["exit"]]
    got = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    text = open(path, errors="replace").read()[:20000]
    d["library"] = got["matched_pattern"] or "none"
    d["want"] = d["file"].split("/")[0]
    d["held"] = d["tool"] in held_tools
    d["features"] = {w.lower() for w in WORD.findall(text)} | {"tool=" + d["tool"], "check=" + d["check_type"]}
    samples.append(d)


def train(data):
    classes = collections.Counter(d["want"] for d in data)
    counts = {c: collections.Counter() for c in classes}
    for d in data:
        counts[d["want"]].update(d["features"])
    vocab = set().union(*(d["features"] for d in data))
    return classes, counts, vocab


def predict(model, d):
    classes, counts, vocab = model
    n = sum(classes.values())
    score = {c: math.log(classes[c] / n) + sum(math.log((counts[c][f] + 0.5) / (classes[c] + 1))
                                                 for f in d["features"] if f in vocab) for c in classes}
    top = max(score.values())
    z = sum(math.exp(v - top) for v in score.values())
    best = max(score, key=score.get)
    return best, 1 / z


def figures(pairs, name):
    fail = [(d, c, p) for d, c, p in pairs if d["want"] != "none"]
    clean = [(d, c, p) for d, c, p in pairs if d["want"] == "none"]
    base = sum(d["library"] == d["want"] for d, _, _ in fail)
    print(f"{name}: library alone {base}/{len(fail)} failures, {sum(d['library'] == 'none' for d, _, _ in clean)}/{len(clean)} clean")
    for threshold in (0.5, 0.7, 0.9, 0.99):
        right = sum((c if d["library"] == "none" and c != "none" and p >= threshold else d["library"]) == d["want"]
                    for d, c, p in fail)
        quiet = sum(d["library"] == "none" and not (c != "none" and p >= threshold) for d, c, p in clean)
        print(f"  with the fallback at posterior >= {threshold}: {right}/{len(fail)} failures, {quiet}/{len(clean)} clean")


tuned = [d for d in samples if not d["held"]]
held = [d for d in samples if d["held"]]
loto = []
for tool in sorted({d["tool"] for d in tuned}):
    model = train([d for d in tuned if d["tool"] != tool])
    loto += [(d,) + predict(model, d) for d in tuned if d["tool"] == tool]
bins = collections.defaultdict(lambda: [0, 0])
for d, c, p in loto:
    if d["want"] != "none":
        b = bins[min(int(p * 10), 9)]
        b[0] += c == d["want"]
        b[1] += 1
print("leave-one-tool-out over the tuned tools, the classifier alone on failures, by posterior:")
for b in sorted(bins):
    print(f"  [{b / 10:.1f}, {(b + 1) / 10:.1f}): {bins[b][0]}/{bins[b][1]} right")
figures(loto, "tuned tools, leave-one-tool-out")
model = train(tuned)
figures([(d,) + predict(model, d) for d in held], "held-out tools")
