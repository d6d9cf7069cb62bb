//! Stage outputs: reading declared outputs from `## key` sections, and typing their values.

use std::collections::BTreeMap;

/// Reads the declared outputs of a stage from what it printed.
///
/// A section starts at a line `## key` where `key` is one of `declared`, and runs to the next
/// such line. When exactly one output is declared and no section names it, the whole output
/// is that output. Returns the outputs found and the declared keys that are missing (or empty).
pub fn extract(declared: &[String], text: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<(&str, Vec<&str>)> = None;
    for line in text.lines() {
        let heading = line.strip_prefix("## ").map(str::trim).filter(|k| declared.iter().any(|d| d == k));
        match heading {
            Some(key) => {
                if let Some((k, body)) = current.take() {
                    keep(&mut found, k, &body);
                }
                current = Some((key, Vec::new()));
            }
            None => {
                if let Some((_, body)) = current.as_mut() {
                    body.push(line);
                }
            }
        }
    }
    if let Some((k, body)) = current.take() {
        keep(&mut found, k, &body);
    }
    if let [only] = declared
        && !found.contains_key(only)
    {
        found.insert(only.clone(), text.trim().to_owned());
    }
    found.retain(|_, v| !v.is_empty());
    let missing = declared.iter().filter(|d| !found.contains_key(*d)).cloned().collect();
    (found, missing)
}

/// Records a section; an empty repeat of a heading (an agent echoing the list of expected
/// outputs) does not erase what an earlier section of that key said.
fn keep(found: &mut BTreeMap<String, String>, key: &str, body: &[&str]) {
    let text = body.join("\n").trim().to_owned();
    if !text.is_empty() || !found.contains_key(key) {
        found.insert(key.to_owned(), text);
    }
}

/// The value conditions see for an output's text: the parsed YAML when the text is a number,
/// boolean, list or mapping; otherwise the text itself.
pub fn typed_value(text: &str) -> serde_json::Value {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return serde_json::Value::String(String::new());
    }
    match serde_saphyr::from_str::<serde_json::Value>(trimmed) {
        Ok(
            v @ (serde_json::Value::Number(_)
            | serde_json::Value::Bool(_)
            | serde_json::Value::Array(_)
            | serde_json::Value::Object(_)),
        ) => v,
        _ => serde_json::Value::String(text.to_owned()),
    }
}

/// Finds the first fenced ```yaml or ```json block in a text and returns its contents.
pub fn fenced_block(text: &str) -> Option<&str> {
    let mut start = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        match start {
            None if t == "```yaml" || t == "```yml" || t == "```json" => start = Some(offset + line.len()),
            Some(s) if t == "```" => return Some(&text[s..offset]),
            _ => {}
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn reads_sections_and_keeps_subheadings() {
        let text =
            "preamble\n## diagnosis\nThe button handler\n### detail\nis not bound\n## affected_files\nsrc/a.js\n";
        let (found, missing) = extract(&keys(&["diagnosis", "affected_files"]), text);
        assert_eq!(
            found,
            BTreeMap::from([
                ("diagnosis".into(), "The button handler\n### detail\nis not bound".into()),
                ("affected_files".into(), "src/a.js".into()),
            ])
        );
        assert!(missing.is_empty());
    }

    #[test]
    fn an_empty_repeated_heading_keeps_the_earlier_text() {
        let (found, missing) = extract(&keys(&["answer"]), "## answer\nforty-two\n\n## answer\n");
        assert_eq!(found, BTreeMap::from([("answer".into(), "forty-two".into())]));
        assert!(missing.is_empty());
    }

    #[test]
    fn single_output_takes_whole_text() {
        let (found, missing) = extract(&keys(&["summary"]), "  all good\n");
        assert_eq!(found, BTreeMap::from([("summary".into(), "all good".into())]));
        assert!(missing.is_empty());
    }

    #[test]
    fn missing_and_empty_outputs_are_reported() {
        let (found, missing) = extract(&keys(&["a", "b", "c"]), "## a\nx\n## b\n\n");
        assert_eq!(found, BTreeMap::from([("a".into(), "x".into())]));
        assert_eq!(missing, keys(&["b", "c"]));
        let (_, missing) = extract(&keys(&["only"]), "   \n");
        assert_eq!(missing, keys(&["only"]));
    }

    #[test]
    fn types_values_for_conditions() {
        assert_eq!(typed_value("2"), json!(2));
        assert_eq!(typed_value(" 2.5\n"), json!(2.5));
        assert_eq!(typed_value("true"), json!(true));
        assert_eq!(typed_value("[a, b]"), json!(["a", "b"]));
        assert_eq!(typed_value("- a\n- b"), json!(["a", "b"]));
        assert_eq!(typed_value("risks: 2"), json!({"risks": 2}));
        assert_eq!(typed_value("The login button"), json!("The login button"));
        assert_eq!(typed_value("null"), json!("null"));
    }

    #[test]
    fn finds_fenced_blocks() {
        assert_eq!(fenced_block("text\n```yaml\n- a: 1\n```\nmore"), Some("- a: 1\n"));
        assert_eq!(fenced_block("```json\n[]\n```"), Some("[]\n"));
        assert_eq!(fenced_block("```rust\nfn x() {}\n```"), None);
    }
}
