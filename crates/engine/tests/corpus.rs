//! Accuracy of the built-in failure patterns on real tool output (corpus/, produced by
//! corpus/generate.sh on this project's machines): every file must be classified as the
//! folder it is in, and `none/` files must match nothing.

use std::path::Path;

use loopwright_engine::patterns::Library;

#[test]
fn every_corpus_file_is_classified_as_its_category() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus");
    let lib = Library::builtin();
    let mut total = 0;
    let mut wrong = Vec::new();
    let mut categories = std::collections::BTreeMap::<String, usize>::new();
    for dir in std::fs::read_dir(&root).expect("corpus").flatten().filter(|e| e.path().is_dir()) {
        let category = dir.file_name().to_string_lossy().into_owned();
        for file in std::fs::read_dir(dir.path()).expect("category").flatten() {
            let text = std::fs::read_to_string(file.path()).expect("text");
            let got = lib.classify(&text);
            let want = (category != "none").then(|| category.clone());
            total += 1;
            *categories.entry(category.clone()).or_default() += 1;
            if got.matched_pattern != want {
                wrong.push(format!(
                    "{}/{}: got {:?} ({}, {:?}), want {:?}",
                    category,
                    file.file_name().to_string_lossy(),
                    got.matched_pattern,
                    got.confidence,
                    got.signals,
                    want
                ));
            }
        }
    }
    assert!(total >= 40, "the corpus has {total} files");
    assert!(wrong.is_empty(), "{} of {total} misclassified:\n{}", wrong.len(), wrong.join("\n"));
    eprintln!("corpus: {total} files, all classified right; per category: {categories:?}");
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
