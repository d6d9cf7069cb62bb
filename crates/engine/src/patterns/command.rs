//! Which tools a shell command runs, so a pattern's `commands:` can weigh the vocabulary of the
//! tool that printed the output: `cd web && npx eslint src` runs `eslint`, `python3 -m pytest`
//! runs `pytest`, `sh -c 'cargo clippy -- -D warnings'` runs `cargo clippy`.

/// Words before the program that only wrap it.
const WRAPPERS: [&str; 10] =
    ["env", "sudo", "time", "nice", "nohup", "command", "exec", "stdbuf", "ionice", "xvfb-run"];
/// Runners whose next word is the program (`npx eslint`, `bundle exec rspec`).
const RUNNERS: [(&str, &str); 10] = [
    ("npx", ""),
    ("bunx", ""),
    ("pnpx", ""),
    ("pnpm", "exec"),
    ("pnpm", "dlx"),
    ("uv", "run"),
    ("poetry", "run"),
    ("pipenv", "run"),
    ("bundle", "exec"),
    ("hatch", "run"),
];
/// Words of a tool kept: the program and up to two sub-commands (`npm run lint`).
const TOOL_WORDS: usize = 3;

/// The tools a command runs, each as its program's name (lower case, without a path or a
/// version suffix) and the sub-commands after it: `[["cargo", "clippy"]]`.
pub fn tools(command: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    collect(command, &mut out, 0);
    out
}

fn collect(command: &str, out: &mut Vec<Vec<String>>, depth: usize) {
    let words = shell_words::split(command)
        .unwrap_or_else(|_| command.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
    let mut segment: Vec<String> = Vec::new();
    for word in words {
        // `a && b`, `a; b`, `a | tee log`: each part runs a tool of its own.
        let (word, ends) = match word.as_str() {
            "&&" | "||" | ";" | "|" | "|&" | "&" => (String::new(), true),
            w if w.ends_with(';') => (w.trim_end_matches(';').to_owned(), true),
            _ => (word, false),
        };
        if !word.is_empty() {
            segment.push(word);
        }
        if ends {
            simple(&std::mem::take(&mut segment), out, depth);
        }
    }
    simple(&segment, out, depth);
}

fn simple(words: &[String], out: &mut Vec<Vec<String>>, depth: usize) {
    let mut rest = words;
    loop {
        let Some(first) = rest.first() else { return };
        let program = program_name(first);
        if first.contains('=') && !first.starts_with('-') && !first.starts_with('=') {
            rest = &rest[1..]; // FOO=bar cargo test
        } else if WRAPPERS.contains(&program.as_str()) {
            rest = skip_flags(&rest[1..]);
        } else if program == "timeout" {
            // timeout [-s KILL] [-k 5] 60 cmd
            let mut r = &rest[1..];
            while let Some(w) = r.first().filter(|w| w.starts_with('-')) {
                let takes_value = matches!(w.as_str(), "-s" | "-k" | "--signal" | "--kill-after");
                r = &r[if takes_value { 2 } else { 1 }.min(r.len())..];
            }
            rest = r.get(1..).unwrap_or(&[]);
        } else if let Some((_, sub)) =
            RUNNERS.iter().find(|(r, sub)| *r == program && (sub.is_empty() || rest.get(1).is_some_and(|w| w == sub)))
        {
            rest = skip_flags(&rest[if sub.is_empty() { 1 } else { 2 }..]);
        } else if (program == "sh" || program == "bash" || program == "dash" || program == "zsh")
            && depth < 3
            && let Some(i) =
                rest.iter().position(|w| w == "-c" || (w.starts_with('-') && w.ends_with('c') && !w.starts_with("--")))
            && let Some(script) = rest.get(i + 1)
        {
            collect(script, out, depth + 1);
            return;
        } else if program.starts_with("python") && rest.get(1).is_some_and(|w| w == "-m") && rest.len() > 2 {
            rest = &rest[2..]; // python3 -m pytest
        } else if program == "cd" || program == "export" || program == "set" || program == "source" || program == "." {
            return;
        } else {
            break;
        }
    }
    let Some(first) = rest.first() else { return };
    let mut tool = vec![program_name(first)];
    tool.extend(
        rest[1..]
            .iter()
            .take_while(|w| !w.starts_with('-') && !w.contains('/') && !w.contains('.') && !w.contains('='))
            .filter(|w| !w.starts_with('+')) // cargo +nightly clippy
            .take(TOOL_WORDS - 1)
            .map(|w| w.to_lowercase()),
    );
    out.push(tool);
}

fn skip_flags(words: &[String]) -> &[String] {
    let n = words.iter().take_while(|w| w.starts_with('-')).count();
    &words[n..]
}

/// `/usr/bin/python3.11` → `python3`, `./node_modules/.bin/eslint` → `eslint`.
fn program_name(word: &str) -> String {
    let base = word.rsplit('/').next().unwrap_or(word).to_lowercase();
    match base.strip_prefix("python") {
        Some(v) if v.starts_with('3') => "python3".to_owned(),
        _ => base,
    }
}

/// Whether `entry` (`cargo clippy`, `ruff`) names one of `tools`: its words are the start of
/// a tool's words.
pub fn names(entry: &str, tools: &[Vec<String>]) -> bool {
    let want: Vec<String> = entry.split_whitespace().map(str::to_lowercase).collect();
    !want.is_empty() && tools.iter().any(|t| t.len() >= want.len() && t[..want.len()] == want[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn t(command: &str) -> Vec<String> {
        tools(command).into_iter().map(|t| t.join(" ")).collect()
    }

    #[test]
    fn the_tool_is_found_through_wrappers_runners_and_shells() {
        assert_eq!(t("cargo clippy --all-targets -- -D warnings"), ["cargo clippy"]);
        assert_eq!(t("cargo +nightly fmt --check"), ["cargo fmt"]);
        assert_eq!(t("cd web && npx --yes eslint src"), ["eslint src"]);
        assert_eq!(t("CI=1 RUST_LOG=debug timeout -s KILL 60 cargo test"), ["cargo test"]);
        assert_eq!(t("python3.11 -m pytest -q tests/"), ["pytest"]);
        assert_eq!(t("sh -c 'ruff check . && mypy src'"), ["ruff check", "mypy src"]);
        assert_eq!(t("bash -lc \"go vet ./...\""), ["go vet"]);
        assert_eq!(t("./node_modules/.bin/tsc --noEmit"), ["tsc"]);
        assert_eq!(t("npm run lint; echo done"), ["npm run lint", "echo done"]);
        assert_eq!(t("uv run pytest -x | tee log.txt"), ["pytest", "tee"]);
        assert_eq!(t("bundle exec rspec spec/a_spec.rb"), ["rspec"]);
        assert_eq!(t("echo 'unbalanced"), ["echo 'unbalanced"], "split on spaces when quotes do not close");
        assert!(tools("").is_empty());
    }

    #[test]
    fn an_entry_names_a_tool_by_its_first_words() {
        let found = tools("cargo clippy -- -D warnings");
        assert!(names("cargo", &found));
        assert!(names("cargo clippy", &found));
        assert!(names("Cargo Clippy", &found));
        assert!(!names("cargo test", &found));
        assert!(!names("clippy", &found));
        assert!(!names("", &found));
    }
}
