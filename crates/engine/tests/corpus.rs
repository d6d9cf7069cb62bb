//! Accuracy of the built-in classification (patterns, then the statistical classifier) on real
//! tool output: `corpus/`, made by `corpus/generate.sh`, one file per sample and one row of
//! `corpus/samples.tsv` with the tool, its ecosystem, the check type, the exit status and the
//! command.
//!
//! The corpus is split by tool (`corpus/holdout.txt`, chosen before the patterns were tuned on
//! it): the library is written, and the model trained, against the other tools only, and the
//! held-out figure says how it does on tools it was not written for. Two later parts have figures
//! of their own: the third held-out set (`third.txt`, measured as it falls, no floor) and the
//! tools added for the model to learn from (`tuned4.txt`). The figures, the clean outputs matched
//! by nothing, and the confusion matrices are printed; the test fails when a figure falls below
//! its floor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use loopwright_engine::patterns::{Context, Library};

/// Top-1 accuracy on failures of the tools the library is tuned on.
const TUNED_FLOOR: f64 = 0.98;
/// Top-1 accuracy on failures of the held-out tools (patterns and the statistical classifier:
/// what the binary does without asking an agent).
const HELD_OUT_FLOOR: f64 = 0.68;
/// Held-out failures given a wrong category (not unclassified: wrong), at most.
const HELD_OUT_WRONG_CEILING: f64 = 0.10;
/// Held-out failures whose answer leads to the strategy their label's pattern chooses.
const SAME_STRATEGY_FLOOR: f64 = 0.80;
/// Failures of the tools added for training: the model has seen them, the patterns have not.
const ADDED_FLOOR: f64 = 0.85;
/// Clean outputs (exit 0, nothing wrong) that match no pattern, over both splits.
const CLEAN_FLOOR: f64 = 1.0;

struct Sample {
    file: String,
    category: String,
    tool: String,
    ecosystem: String,
    context: Context,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

fn samples() -> Vec<Sample> {
    let table = std::fs::read_to_string(root().join("samples.tsv")).expect("corpus/samples.tsv");
    table
        .lines()
        .skip(1)
        .map(|line| {
            let cols: Vec<&str> = line.splitn(6, '\t').collect();
            assert_eq!(cols.len(), 6, "samples.tsv: {line}");
            let exit_code = cols[4].parse::<i32>().unwrap_or_else(|_| panic!("samples.tsv: exit of {}", cols[0]));
            Sample {
                file: cols[0].to_owned(),
                category: cols[0].split('/').next().expect("category").to_owned(),
                tool: cols[1].to_owned(),
                ecosystem: cols[2].to_owned(),
                context: Context {
                    command: Some(cols[5].to_owned()),
                    exit_code: Some(exit_code),
                    check_type: Some(cols[3].to_owned()),
                    ..Context::default()
                },
            }
        })
        .collect()
}

fn held_out() -> BTreeSet<String> {
    listed("holdout.txt")
}

/// The third held-out set (issue 28): tools chosen before that changes, measured once at
/// its end and reported as they fall; neither tuned on nor trained on, and outside the first two
/// splits' figures.
fn third() -> BTreeSet<String> {
    listed("third.txt")
}

/// Tools added to the tuned ones in issue 28 for the statistical classifier to learn from: it
/// trains on them, no pattern was written for them; outside the first two splits' figures (their
/// own is printed, with a floor of its own).
fn added() -> BTreeSet<String> {
    listed("tuned4.txt")
}

fn listed(file: &str) -> BTreeSet<String> {
    std::fs::read_to_string(root().join(file))
        .unwrap_or_else(|e| panic!("corpus/{file}: {e}"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_corpus_covers_every_category_with_many_tools_and_the_split_holds_out_a_quarter() {
    let all = samples();
    let held = held_out();
    let later: BTreeSet<String> = third().union(&added()).cloned().collect();
    assert!(all.len() >= 400, "the corpus has {} samples", all.len());
    let on_disk: BTreeSet<String> = std::fs::read_dir(root())
        .expect("corpus")
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| {
            let category = d.file_name().to_string_lossy().into_owned();
            std::fs::read_dir(d.path())
                .expect("category")
                .flatten()
                .map(move |f| format!("{category}/{}", f.file_name().to_string_lossy().trim_end_matches(".txt")))
        })
        .collect();
    let listed: BTreeSet<String> = all.iter().map(|s| s.file.clone()).collect();
    assert_eq!(on_disk, listed, "every corpus file has one row in samples.tsv and no row names a missing file");
    // The first two splits' rule, over their tools (not those added later).
    let samples: Vec<&Sample> = all.iter().filter(|s| !later.contains(&s.tool)).collect();
    let mut tools: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut ecosystems: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &samples {
        tools.entry(&s.category).or_default().insert(s.tool.as_str());
        ecosystems.entry(&s.category).or_default().insert(s.ecosystem.as_str());
    }
    let mut short = Vec::new();
    for (category, t) in &tools {
        let out = t.iter().filter(|t| held.contains(**t)).count();
        if t.len() < 5 || ecosystems[category].len() < 3 || out * 4 < t.len() {
            short.push(format!(
                "{category}: {} tools, {} ecosystems, {out} held out",
                t.len(),
                ecosystems[category].len()
            ));
        }
    }
    assert!(short.is_empty(), "categories short of tools, ecosystems or held-out tools:\n{}", short.join("\n"));
}

/// Right and total per split, and the held-out confusion (want → got → count).
#[derive(Default)]
struct Tally {
    right: usize,
    total: usize,
    misses: Vec<String>,
    confusion: BTreeMap<String, BTreeMap<String, usize>>,
}

impl Tally {
    /// One more sample: right, or a miss said so.
    fn count(&mut self, ok: bool, miss: String) {
        self.total += 1;
        if ok {
            self.right += 1;
        } else {
            self.misses.push(miss);
        }
    }

    /// Failures given another category (unclassified is not wrong), from the confusion.
    fn wrong(&self) -> usize {
        self.confusion
            .iter()
            .filter(|(want, _)| *want != "none")
            .map(|(want, row)| {
                row.iter().filter(|(got, _)| *got != want && *got != "none").map(|(_, n)| n).sum::<usize>()
            })
            .sum()
    }

    fn rate(&self) -> f64 {
        if self.total == 0 { 1.0 } else { self.right as f64 / self.total as f64 }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} ({:.1}%)", self.right, self.total, 100.0 * self.rate())
    }
}

#[test]
fn the_library_classifies_tools_it_was_not_written_for() {
    let lib = Library::builtin();
    let held = held_out();
    let third_tools = third();
    let added_tools = added();
    let mut added_tally = Tally::default();
    let (mut tuned, mut out, mut clean, mut text_only) =
        (Tally::default(), Tally::default(), Tally::default(), Tally::default());
    let (mut third, mut third_clean) = (Tally::default(), Tally::default());
    // Held-out failures whose answer, right or wrong, leads to the strategy the label's
    // pattern would choose (an unmatched failure gets analyze_then_fix).
    let mut same_strategy = Tally::default();
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for s in samples() {
        let text = std::fs::read_to_string(root().join(format!("{}.txt", s.file))).expect("sample");
        let got = lib.classify_in(&text, &s.context);
        let got_id = got.matched_pattern.clone().unwrap_or_else(|| "none".into());
        let ok = got_id == s.category;
        let miss = format!(
            "{} [{}; exit {}; {}]: got {got_id} ({}; {})",
            s.file,
            s.tool,
            s.context.exit_code.unwrap_or_default(),
            s.context.check_type.as_deref().unwrap_or_default(),
            got.confidence,
            got.evidence.iter().map(|e| format!("{} {}", e.kind, e.value)).collect::<Vec<_>>().join(", ")
        );
        if added_tools.contains(&s.tool) {
            added_tally.count(ok, miss);
            continue;
        }
        if third_tools.contains(&s.tool) {
            let tally = if s.category == "none" { &mut third_clean } else { &mut third };
            tally.count(ok, miss);
            *third.confusion.entry(s.category.clone()).or_default().entry(got_id).or_default() += 1;
            continue;
        }
        let tally = if s.category == "none" {
            &mut clean
        } else if held.contains(&s.tool) {
            &mut out
        } else {
            &mut tuned
        };
        tally.total += 1;
        if ok {
            tally.right += 1;
        } else {
            tally.misses.push(miss);
        }
        if held.contains(&s.tool) && s.category != "none" {
            let want = lib.get(&s.category).unwrap_or_else(|| panic!("no pattern {}", s.category));
            same_strategy.total += 1;
            same_strategy.right += usize::from(got.strategy == want.strategy);
        }
        if held.contains(&s.tool) && s.category != "none" {
            *by.entry(format!("{}{}", got.classified_by, if ok { "" } else { " (missed)" })).or_default() += 1;
        }
        if held.contains(&s.tool) {
            *out.confusion.entry(s.category.clone()).or_default().entry(got_id).or_default() += 1;
        }
        if s.category != "none" {
            text_only.total += 1;
            let bare = lib.classify(&text).matched_pattern.unwrap_or_else(|| "none".into());
            text_only.right += usize::from(bare == s.category);
        }
    }
    let wrong = out.wrong();
    let unclassified = out.total - out.right - wrong;
    eprintln!(
        "corpus: tuned tools {tuned}, held-out tools {out} (wrong {wrong}, unclassified {unclassified}), clean outputs matched by nothing {clean}; without context {text_only}"
    );
    eprintln!("held-out failures decided by: {by:?}");
    eprintln!("held-out failures whose answer chooses the label's strategy: {same_strategy}");
    eprintln!("held-out confusion (want → got: n):");
    for (want, row) in &out.confusion {
        let cells: Vec<String> = row.iter().map(|(got, n)| format!("{got}: {n}")).collect();
        eprintln!("  {want} → {}", cells.join(", "));
    }
    eprintln!("tools added for training (issue 28; no pattern written for them): {added_tally}");
    if third.total + third_clean.total > 0 {
        let wrong = third.wrong();
        eprintln!(
            "third set (measured as it falls, no floor): failures {third} (wrong {wrong}, unclassified {}), clean outputs matched by nothing {third_clean}",
            third.total - third.right - wrong
        );
        eprintln!("third-set confusion (want → got: n):");
        for (want, row) in &third.confusion {
            let cells: Vec<String> = row.iter().map(|(got, n)| format!("{got}: {n}")).collect();
            eprintln!("  {want} → {}", cells.join(", "));
        }
    }
    for (name, t) in [
        ("tuned", &tuned),
        ("held-out", &out),
        ("clean", &clean),
        ("third", &third),
        ("third clean", &third_clean),
        ("added", &added_tally),
    ] {
        for m in &t.misses {
            eprintln!("miss ({name}): {m}");
        }
    }
    assert!(tuned.rate() >= TUNED_FLOOR, "tuned tools: {:.3} < {TUNED_FLOOR}", tuned.rate());
    assert!(out.rate() >= HELD_OUT_FLOOR, "held-out tools: {:.3} < {HELD_OUT_FLOOR}", out.rate());
    let wrong_rate = wrong as f64 / out.total as f64;
    assert!(wrong_rate <= HELD_OUT_WRONG_CEILING, "held-out wrong: {wrong_rate:.3} > {HELD_OUT_WRONG_CEILING}");
    assert!(
        same_strategy.rate() >= SAME_STRATEGY_FLOOR,
        "held-out strategy: {:.3} < {SAME_STRATEGY_FLOOR}",
        same_strategy.rate()
    );
    assert!(clean.rate() >= CLEAN_FLOOR, "clean outputs: {:.3} < {CLEAN_FLOOR}", clean.rate());
    assert!(added_tally.rate() >= ADDED_FLOOR, "added tools: {:.3} < {ADDED_FLOOR}", added_tally.rate());
}

#[test]
fn the_decisive_error_wins_over_warnings_deep_in_a_long_log() {
    let mut log = String::new();
    for i in 0..5000 {
        log.push_str(&format!("warning: unused variable `x{i}`\n  --> src/lib.rs:{i}:9\n"));
        log.push_str("   Compiling something v1.0.0\n");
    }
    log.push_str("error[E0425]: cannot find value `total` in this scope\n --> src/main.rs:7:5\n");
    log.push_str("error: could not compile `app` (bin \"app\") due to 1 previous error\n");
    let c = Library::builtin().classify(&log);
    assert_eq!(c.matched_pattern.as_deref(), Some("undefined-name"), "{c:?}");
    assert!(c.confidence >= 0.9, "{c:?}");
}
