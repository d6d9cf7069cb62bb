//! The answer policy: which prompts the supervisor may answer. It fails closed — an allow list
//! decides, never a list of bad spellings:
//!
//! - a prompt about a shell command is answered only when the whole command was read off the
//!   screen ([`Subject::Command`]), splits into shell words, is one simple command or a chain
//!   of them joined by `&&` or `|`, and every part starts with an allowed argv prefix
//!   ([`DEFAULT_ALLOW`] plus `[auto.policy] allow`), with arguments that cannot expand, run
//!   anything else or name a path outside the workspace; redirections only into the workspace;
//! - a prompt about an edit is answered only when the file it names was read off the screen
//!   and lies inside the workspace, reached through real folders, outside `.git/` and
//!   `.loopwright/` (`runners::guard`);
//! - everything else a person answers, with the command shown.
//!
//! The deny list ([`DENY`] plus `[auto] deny`) is only a second opinion that can refuse.

use std::collections::BTreeSet;
use std::path::Path;

use regex::Regex;

use crate::screen::{Prompt, PromptClass, Subject};

/// Commands never approved, whatever the allow list says (matched against the prompt's
/// excerpt and its command): a second opinion that can only refuse.
pub const DENY: &[(&str, &str)] = &[
    ("a force push", r"git\s+push\b[^\n]*(?:--force\b|--force-with-lease\b|\s-f\b|\s\+\S)"),
    (
        "a recursive delete of the root, the home folder, a parent folder or everything",
        r"\brm\s+(?:-[a-zA-Z]*[rR][a-zA-Z]*\s+|--recursive\s+)+(?:-\S+\s+)*(?:/|~|\$HOME|\.\.|\*)",
    ),
    ("dropping a table, database, schema or index", r"(?i)\bdrop\s+(?:table|database|schema|index)\b"),
    ("emptying a table", r"(?i)\btruncate\s+table\b"),
    ("deleting every row of a table", r"(?i)\bdelete\s+from\s+\w+\s*(?:;|$)"),
    ("throwing away uncommitted work (git reset --hard)", r"git\s+reset\s+--hard\b"),
    ("deleting untracked files (git clean -f)", r"git\s+clean\s+-[a-zA-Z]*f"),
    ("deleting a branch that may not be merged (git branch -D)", r"git\s+branch\s+-D\b"),
    ("formatting a file system", r"\bmkfs(?:\.\w+)?\b"),
    ("writing over a device", r"\bdd\s+[^\n]*of=/dev/"),
    ("changing permissions of the whole system", r"chmod\s+-R\s+[0-7]{3,4}\s+/"),
    ("a fork bomb", r":\(\)\s*\{\s*:\|:&\s*\};:"),
    // pytest empties the folder it is given as its temporary base.
    ("pytest's --basetemp, which empties the folder it names", r"--basetemp\b"),
];

/// The commands answered without a person, as argv prefixes: tests, builds, linters and
/// formatters of the common ecosystems, read-only git, and shell commands that only read or
/// print (a redirection of their output must stay inside the workspace). Left out on purpose:
/// anything that runs a program named in its arguments (`find -exec`, `xargs`, `sed`, `awk`,
/// `rg --pre`, `git grep -O`, `env`, `sh -c`), a bare `make`, `git` with options before its
/// subcommand (`-C`, `-c`), and every git command that writes.
pub const DEFAULT_ALLOW: &[&str] = &[
    // Rust
    "cargo test",
    "cargo build",
    "cargo check",
    "cargo clippy",
    "cargo fmt",
    "cargo nextest run",
    "cargo doc",
    "cargo tree",
    "cargo metadata",
    // Python
    "pytest",
    "python -m pytest",
    "python3 -m pytest",
    "uv run pytest",
    "tox",
    "mypy",
    "ruff check",
    "ruff format",
    "flake8",
    "pylint",
    "black",
    // JavaScript and TypeScript
    "npm test",
    "npm run test",
    "npm run build",
    "npm run lint",
    "npm run typecheck",
    "yarn test",
    "pnpm test",
    "tsc",
    "npx tsc",
    "npx eslint",
    "npx jest",
    "npx vitest run",
    "npx prettier --check",
    "eslint",
    "jest",
    "deno test",
    "bun test",
    // Go, JVM, .NET, Ruby, Elixir, C and C++
    "go test",
    "go build",
    "go vet",
    "gofmt -l",
    "mvn test",
    "mvn -q test",
    "gradle test",
    "./gradlew test",
    "dotnet build",
    "dotnet test",
    "bundle exec rspec",
    "rspec",
    "mix test",
    "make test",
    "make check",
    "make build",
    "make lint",
    "ctest",
    // git, read-only
    "git status",
    "git diff",
    "git log",
    "git show",
    "git rev-parse",
    "git ls-files",
    "git blame",
    "git branch --show-current",
    // git, recording the module's work (the protocol's merge step)
    "git add",
    "git commit",
    // Shell commands that read or print
    "ls",
    "pwd",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "diff",
    "echo",
    "printf",
    "true",
    "test",
    "which",
    "file",
    "stat",
    "tree",
    "sort",
    "uniq",
    "mkdir",
    "touch",
];

/// What an option of an allowed command does with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Writes the file (or folder) it names: answered only when the path guard would write it.
    Writes,
    /// Runs the program or code it names, or changes what runs: never answered.
    Runs,
}

/// Options of an allowed command that write files or run programs.
struct OptionRule {
    /// The command's argv prefix.
    command: &'static [&'static str],
    /// Its short options.
    short: &'static [char],
    /// Its long options (`-name` for Go's single-dash flags).
    long: &'static [&'static str],
    /// What their value does.
    effect: Effect,
}

const fn rule(
    command: &'static [&'static str],
    short: &'static [char],
    long: &'static [&'static str],
    effect: Effect,
) -> OptionRule {
    OptionRule { command, short, long, effect }
}

/// The options of allowed commands that write files or run programs, whatever their spelling
/// (`-oVALUE`, `-o VALUE`, `--opt=VALUE`, `--opt VALUE`, a long option shortened to a prefix
/// as getopt allows, a short option inside a cluster).
const OPTIONS: &[OptionRule] = &[
    rule(&["sort"], &['o', 'T'], &["output", "temporary-directory"], Effect::Writes),
    rule(&["sort"], &[], &["compress-program"], Effect::Runs),
    rule(&["tree"], &['o'], &[], Effect::Writes),
    rule(&["file"], &['C'], &["compile"], Effect::Runs),
    rule(&["git", "diff"], &[], &["output"], Effect::Writes),
    rule(&["git", "log"], &[], &["output"], Effect::Writes),
    rule(&["git", "show"], &[], &["output"], Effect::Writes),
    rule(&["git", "diff"], &[], &["ext-diff", "textconv"], Effect::Runs),
    rule(&["git", "log"], &[], &["ext-diff", "textconv"], Effect::Runs),
    rule(&["git", "show"], &[], &["ext-diff", "textconv"], Effect::Runs),
    rule(&["cargo"], &['Z'], &["config"], Effect::Runs),
    rule(&["cargo"], &[], &["target-dir", "artifact-dir"], Effect::Writes),
    rule(&["pytest"], &['p', 'o'], &["override-ini", "pyargs"], Effect::Runs),
    rule(&["python", "-m", "pytest"], &['p', 'o'], &["override-ini", "pyargs"], Effect::Runs),
    rule(&["python3", "-m", "pytest"], &['p', 'o'], &["override-ini", "pyargs"], Effect::Runs),
    rule(&["pytest"], &[], &["junitxml", "junit-xml", "resultlog"], Effect::Writes),
    rule(&["eslint"], &['o'], &["output-file"], Effect::Writes),
    rule(&["npx", "eslint"], &['o'], &["output-file"], Effect::Writes),
    rule(&["eslint"], &[], &["rulesdir", "resolve-plugins-relative-to"], Effect::Runs),
    rule(&["npx", "eslint"], &[], &["rulesdir", "resolve-plugins-relative-to"], Effect::Runs),
    rule(&["tsc"], &[], &["outFile", "outDir", "declarationDir", "tsBuildInfoFile"], Effect::Writes),
    rule(&["npx", "tsc"], &[], &["outFile", "outDir", "declarationDir", "tsBuildInfoFile"], Effect::Writes),
    rule(&["npm"], &[], &["script-shell", "node-options", "prefix"], Effect::Runs),
    rule(&["make"], &['E'], &["eval"], Effect::Runs),
    rule(&["go"], &[], &["-exec", "-toolexec", "-overlay"], Effect::Runs),
    rule(
        &["go"],
        &[],
        &[
            "-o",
            "-coverprofile",
            "-cpuprofile",
            "-memprofile",
            "-blockprofile",
            "-mutexprofile",
            "-trace",
            "-outputdir",
        ],
        Effect::Writes,
    ),
];

/// Allowed commands whose second operand is a file they write (`uniq INPUT OUTPUT`).
const WRITES_SECOND_OPERAND: &[&str] = &["uniq"];

/// Judges the options of `argv` (an allowed command) that write files or run programs.
fn judge_options(argv: &[String], workspace: &Path) -> Result<(), String> {
    let rules: Vec<&OptionRule> = OPTIONS
        .iter()
        .filter(|r| argv.len() >= r.command.len() && argv.iter().zip(r.command.iter()).all(|(a, p)| a == p))
        .collect();
    let effect = |target: &str, effect: Effect, option: &str| -> Result<(), String> {
        match effect {
            Effect::Runs => {
                Err(format!("`{}` with `{option}` runs a program or code it names: answered by a person", argv[0]))
            }
            Effect::Writes => loopwright_runners::guard::writable(workspace, target)
                .map(|_| ())
                .map_err(|e| format!("`{option}` writes `{target}`: {e}")),
        }
    };
    let mut operands = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let word = &argv[i];
        i += 1;
        if word == "--" {
            operands.extend(argv[i..].iter().cloned());
            break;
        }
        if let Some(long) =
            word.strip_prefix("--").or_else(|| word.strip_prefix('-').filter(|w| argv[0] == "go" && w.len() > 1))
        {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let go = argv[0] == "go";
            let hit = rules.iter().find_map(|r| {
                let eff = &r.effect;
                r.long
                    .iter()
                    .find(|l| {
                        let l = if go { l.trim_start_matches('-') } else { l };
                        // getopt takes any unambiguous prefix of a long option.
                        !name.is_empty() && if go { l == name } else { l.starts_with(name) }
                    })
                    .map(|l| (*l, *eff))
            });
            if let Some((option, eff)) = hit {
                let value = match value {
                    Some(v) => v,
                    None => {
                        argv.get(i).cloned().inspect(|_| i += 1).ok_or_else(|| format!("`--{option}` has no value"))?
                    }
                };
                effect(&value, eff, &format!("--{}", option.trim_start_matches('-')))?;
            }
            continue;
        }
        if let Some(cluster) = word.strip_prefix('-').filter(|w| !w.is_empty()) {
            for (at, c) in cluster.char_indices() {
                let Some(eff) = rules.iter().find(|r| r.short.contains(&c)).map(|r| r.effect) else { continue };
                let rest = &cluster[at + c.len_utf8()..];
                let value = if rest.is_empty() {
                    argv.get(i).cloned().inspect(|_| i += 1).ok_or_else(|| format!("`-{c}` has no value"))?
                } else {
                    rest.to_owned()
                };
                effect(&value, eff, &format!("-{c}"))?;
                break;
            }
            continue;
        }
        operands.push(word.clone());
    }
    if WRITES_SECOND_OPERAND.contains(&argv[0].as_str())
        && let Some(output) = operands.get(1)
    {
        effect(output, Effect::Writes, "its second operand")?;
    }
    Ok(())
}

/// Commands whose arguments are printed, never run or expanded as paths by the command itself:
/// their words may hold any text but what makes a shell run or expand something.
const DATA_COMMANDS: &[&str] = &["echo", "printf"];

/// What to do about a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Type these keys.
    Answer(String),
    /// Leave it for a person, for this reason.
    Refuse(String),
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Policy {
    answer: BTreeSet<PromptClass>,
    deny: Vec<(String, Regex)>,
    allow: Vec<Vec<String>>,
    /// Hosts a fetch prompt is answered for (each also allows its subdomains).
    fetch: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(PromptClass::ALL.iter().copied().collect(), &[], &[]).expect("the built-in lists compile")
    }
}

impl Policy {
    /// A policy answering `answer`'s classes; commands allowed by [`DEFAULT_ALLOW`] and
    /// `extra_allow` (argv prefixes, written as shell words); never a prompt matching the
    /// built-in deny list or one of `extra_deny` (regular expressions).
    pub fn new(answer: BTreeSet<PromptClass>, extra_deny: &[String], extra_allow: &[String]) -> Result<Self, String> {
        let mut deny = Vec::new();
        let named = DENY.iter().map(|(words, p)| ((*words).to_owned(), (*p).to_owned()));
        let added = extra_deny.iter().map(|p| (format!("a command your [auto] deny list names (`{p}`)"), p.clone()));
        for (words, p) in named.chain(added) {
            let re = Regex::new(&p).map_err(|e| format!("deny pattern {p:?}: {e}"))?;
            deny.push((words, re));
        }
        let mut allow = Vec::new();
        for entry in DEFAULT_ALLOW.iter().map(|s| (*s).to_owned()).chain(extra_allow.iter().cloned()) {
            let words = shell_words::split(&entry).map_err(|e| {
                format!("[auto.policy] allow: the entry {entry:?}: {e} (write each command as shell words, like \"cargo xtask lint\")")
            })?;
            if words.is_empty() {
                return Err(format!(
                    "[auto.policy] allow: the entry {entry:?} is empty, which would allow every command"
                ));
            }
            allow.push(words);
        }
        let mut answer = answer;
        answer.remove(&PromptClass::Unclear);
        Ok(Self { answer, deny, allow, fetch: Vec::new() })
    }

    /// The classes answered.
    pub fn answered(&self) -> &BTreeSet<PromptClass> {
        &self.answer
    }

    /// Decides on a prompt shown by an agent working in `workspace`.
    pub fn decide(&self, prompt: &Prompt, workspace: &Path) -> Decision {
        let subject_text = match &prompt.subject {
            Subject::Command(c) => c.clone(),
            Subject::Files(f) => f.join("\n"),
            Subject::Url(u) => u.clone(),
            Subject::Unseen => String::new(),
        };
        if let Some((words, _)) =
            self.deny.iter().find(|(_, re)| re.is_match(&prompt.excerpt) || re.is_match(&subject_text))
        {
            return Decision::Refuse(format!("the prompt is about a destructive command: {words}"));
        }
        if prompt.class == PromptClass::Unclear || prompt.key.is_empty() {
            return Decision::Refuse(format!("an unclear prompt ({}): not answered without a person", prompt.pattern));
        }
        if !self.answer.contains(&prompt.class) {
            return Decision::Refuse(format!("the policy does not answer {} prompts", prompt.class.as_str()));
        }
        let verdict = match (prompt.class, &prompt.subject) {
            (PromptClass::Command, Subject::Command(command)) => self.judge_command(command, workspace),
            (PromptClass::Command, _) => {
                Err(format!("the command of this prompt ({}) is not shown whole where it can be read", prompt.pattern))
            }
            (PromptClass::Edit, Subject::Files(files)) if !files.is_empty() => judge_files(files, workspace),
            (PromptClass::Edit, _) => Err(format!(
                "the file this edit prompt ({}) is about is not shown where it can be read",
                prompt.pattern
            )),
            (PromptClass::Fetch, Subject::Url(url)) => self.judge_fetch(url),
            (PromptClass::Fetch, _) => Err(format!(
                "the address this fetch prompt ({}) is about is not shown where it can be read",
                prompt.pattern
            )),
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => Decision::Answer(prompt.key.clone()),
            Err(why) => Decision::Refuse(why),
        }
    }

    /// The same policy, answering fetch prompts for `hosts` (names like `docs.rs`; each allows
    /// its subdomains too). None by default: a fetch goes to a person.
    pub fn with_fetch(mut self, hosts: &[String]) -> Result<Self, String> {
        for host in hosts {
            let name = host.trim().to_ascii_lowercase();
            let valid = !name.is_empty()
                && name.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
            if !valid {
                return Err(format!(
                    "[auto.policy] fetch: {host:?} is not a host name (expected a name like \"docs.rs\", without scheme, port or path)"
                ));
            }
            self.fetch.push(name);
        }
        Ok(self)
    }

    /// Whether the page at `url` may be fetched without a person: `Err` says why not.
    pub fn judge_fetch(&self, url: &str) -> Result<(), String> {
        let host = url_host(url).ok_or_else(|| format!("`{url}` has no host that can be read"))?.to_ascii_lowercase();
        let allowed = self.fetch.iter().any(|h| host == *h || host.ends_with(&format!(".{h}")));
        if allowed {
            Ok(())
        } else {
            Err(format!("fetching `{url}`: {host} is not a host answered for ([auto.policy] fetch)"))
        }
    }

    /// Whether `command` may run without a person: `Err` says why not.
    pub fn judge_command(&self, command: &str, workspace: &Path) -> Result<(), String> {
        // A backslash at the end of a line joins it to the next, as the shell does.
        let joined = command.replace("\\\r\n", "").replace("\\\n", "");
        if joined.trim().is_empty() {
            return Err("the command is empty".into());
        }
        if joined.contains('\n') || joined.contains('\r') {
            return Err("the command spans several lines: a script is answered by a person".into());
        }
        let words =
            shell_words::split(&joined).map_err(|e| format!("the command cannot be read as shell words: {e}"))?;
        let mut part: Vec<String> = Vec::new();
        let mut parts: Vec<Vec<String>> = Vec::new();
        let mut words = words.into_iter();
        while let Some(word) = words.next() {
            match word.as_str() {
                "&&" | "|" => parts.push(std::mem::take(&mut part)),
                _ if is_operator(&word) => {
                    return Err(format!("`{word}` joins commands in a way only `&&` and `|` are answered for"));
                }
                _ => {
                    if let Some((op, target)) = redirection(&word) {
                        let target = match target {
                            Some(t) => t.to_owned(),
                            None => words.next().ok_or_else(|| format!("`{word}` redirects to nothing"))?,
                        };
                        judge_redirection(op, &target, workspace)?;
                    } else {
                        part.push(word);
                    }
                }
            }
        }
        parts.push(part);
        for argv in &parts {
            self.judge_simple(argv)?;
            judge_options(argv, workspace)?;
        }
        Ok(())
    }

    /// One simple command (redirections already taken out).
    fn judge_simple(&self, argv: &[String]) -> Result<(), String> {
        let Some(program) = argv.first() else {
            return Err("an empty command in a chain".into());
        };
        if program.contains('=') && !program.starts_with('=') {
            return Err(format!("`{program}` sets a variable for the command: answered by a person"));
        }
        let data = DATA_COMMANDS.contains(&program.as_str());
        for word in argv {
            judge_word(word, data)?;
        }
        if self.allow.iter().any(|prefix| argv.len() >= prefix.len() && argv[..prefix.len()] == prefix[..]) {
            Ok(())
        } else {
            Err(format!("`{}` is not on the allow list ([auto.policy] allow)", shown(argv)))
        }
    }
}

/// A word made only of a shell's control operators (`;`, `||`, `&`, `(`, …).
fn is_operator(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| matches!(c, ';' | '&' | '|' | '(' | ')' | '!' | '{' | '}'))
}

/// `>`, `>>`, `2>`, `<` and the like, with the target when it is in the same word.
fn redirection(word: &str) -> Option<(&str, Option<&str>)> {
    let digits = word.chars().take_while(char::is_ascii_digit).count();
    let rest = &word[digits..];
    let op = ["&>>", "&>", ">>", ">|", ">", "<<", "<"].into_iter().find(|op| rest.starts_with(op))?;
    let target = &rest[op.len()..];
    Some((op, (!target.is_empty()).then_some(target)))
}

fn judge_redirection(op: &str, target: &str, workspace: &Path) -> Result<(), String> {
    match (op, target) {
        (">", "&1" | "&2") => Ok(()),
        (">" | ">>" | "<", "/dev/null") => Ok(()),
        (">" | ">>", path) => {
            judge_word(path, false)?;
            loopwright_runners::guard::writable(workspace, path)
                .map(|_| ())
                .map_err(|e| format!("a redirection into {path}: {e}"))
        }
        ("<", path) => {
            judge_word(path, false)?;
            loopwright_runners::guard::components(path)
                .map(|_| ())
                .map_err(|e| format!("a redirection from {path}: {e}"))
        }
        _ => Err(format!("the redirection `{op}{target}` is answered by a person")),
    }
}

/// A word may not expand (variables, globs, `~`), run something (`$(…)`, backticks), join
/// commands, or name a path outside the workspace. Words of a data command (`echo`, `printf`)
/// may hold any other text.
fn judge_word(word: &str, data: bool) -> Result<(), String> {
    // Besides plain characters, a word may hold what a quoted argument holds and no shell acts
    // on in any quoting: a space or a quote can only be in a word that was quoted (or
    // escaped), and `!` expands nothing in the non-interactive shell an agent runs
    // (`git commit -m "Add the greeting"`, `pytest -k "a and not b"`). Globs, `~`, `$`,
    // backticks, backslashes and operators stay out, quoted or not.
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+,=^ '\"!".contains(c);
    let unsafe_in_data = |c: char| "`$;&|<>".contains(c) || c.is_control();
    if data {
        if let Some(c) = word.chars().find(|&c| unsafe_in_data(c)) {
            return Err(format!("`{word}` holds `{}`, which the shell would act on", c.escape_default()));
        }
        return Ok(());
    }
    if let Some(c) = word.chars().find(|&c| !plain(c)) {
        return Err(format!("`{word}` holds `{}`: only plain words are answered without a person", c.escape_default()));
    }
    // The value of `--option=VALUE` is a word of its own for this purpose.
    let value = word.strip_prefix('-').and_then(|w| w.split_once('=')).map_or(word, |(_, v)| v);
    for candidate in [word, value] {
        if candidate.starts_with('/') && candidate != "/dev/null" {
            return Err(format!("`{word}` names a path outside the workspace"));
        }
        if candidate.split(['/', '=', ':', ',']).any(|c| c == "..") {
            return Err(format!("`{word}` leads out of the folder with `..`"));
        }
        // Git's and loopwright's own files are written by neither the agent nor its commands
        // (`git diff --output=.git/hooks/pre-commit`, `touch .loopwright/x`).
        if let Err(refused @ loopwright_runners::guard::Refused::Control { .. }) =
            loopwright_runners::guard::components(candidate)
        {
            return Err(format!("`{word}`: {refused}"));
        }
    }
    Ok(())
}

/// The host of an `http(s)://` address (without port), or `None` when it has none or names a
/// user (`https://docs.rs@evil.example/`).
pub fn url_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') || authority.contains('\\') {
        return None;
    }
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { authority });
    let valid = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    valid.then_some(host)
}

/// Every file an edit prompt names must be one loopwright itself would write.
fn judge_files(files: &[String], workspace: &Path) -> Result<(), String> {
    for file in files {
        if file.starts_with('~') {
            return Err(format!("an edit of {file} is in the home folder, outside the workspace"));
        }
        let relative = match Path::new(file).strip_prefix(workspace) {
            Ok(rel) if Path::new(file).is_absolute() => rel.to_string_lossy().into_owned(),
            _ => file.clone(),
        };
        loopwright_runners::guard::writable(workspace, &relative)
            .map_err(|e| format!("an edit of {file} is not answered without a person: {e}"))?;
    }
    Ok(())
}

fn shown(argv: &[String]) -> String {
    shell_words::join(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(command: &str) -> Result<(), String> {
        let dir = std::env::temp_dir();
        Policy::default().judge_command(command, &dir)
    }

    #[test]
    fn word_rules() {
        assert!(judge("cargo test -p loopwright-auto -- --nocapture").is_ok());
        assert!(judge("git log --oneline HEAD~3..HEAD").is_err(), "`..` in a revision range is refused too");
        assert!(judge("git log --oneline -n 3").is_ok());
        assert!(judge("cargo test 2>&1 | tail -20").is_ok());
        assert!(judge("echo '{\"step\": \"plan\"}' > sig.json").is_ok());
        assert!(judge("echo $(id) > sig.json").is_err());
        assert!(judge("echo 'ok' > /tmp/x").is_err());
        assert!(judge("cat ~/.ssh/id_rsa").is_err());
        assert!(judge("FOO=1 cargo test").is_err());
        assert!(judge("cargo test; ls").is_err());
        assert!(judge("cargo test || ls").is_err());
        // Quoted arguments are judged by their parsed words.
        assert!(judge("git commit -m \"Add the greeting\"").is_ok());
        assert!(judge("git add greeting.txt && git commit -m 'Say \"hello\", don'\\''t shout!'").is_ok());
        assert!(judge("pytest -k \"parser and not slow\"").is_ok());
        assert!(judge("git commit -m \"a b\";rm -rf x").is_err(), "an operator next to a quoted word");
        assert!(judge("git commit -m \"$(id)\"").is_err());
        assert!(judge("git commit -m \"`id`\"").is_err());
        assert!(judge("pytest -k \"a*\"").is_err());
        assert!(judge("git commit -m \"x\" -- /etc/passwd").is_err());
        assert!(judge("git -c core.hooksPath=h commit -m x").is_err());
    }

    #[test]
    fn options_that_write_or_run_are_judged_whatever_their_spelling() {
        let refused = [
            "sort -o .git/config a.txt",
            "sort -o.git/config a.txt",
            "sort --output=.git/config a.txt",
            "sort --output .git/config a.txt",
            "sort --out=.git/config a.txt",
            "sort --o .git/config a.txt",
            "sort -ro.git/config a.txt",
            "sort -r -o .git/hooks/pre-commit a.txt",
            "sort -m -o.GIT/config a.txt b.txt",
            "sort -k1 -o.loopwright/pipelines/p.yml a.txt",
            "sort --compress-program=sh a.txt",
            "sort --compress-program sh a.txt",
            "sort --compress-prog=sh a.txt",
            "sort --comp=sh a.txt",
            "sort -T . a.txt",
            "sort -S 1M -T.git a.txt",
            "sort -o",
            "uniq a.txt .git/config",
            "uniq -c a.txt .git/config",
            "tree -o .git/config",
            "git diff --output=.git/hooks/post-checkout",
            "git log --ext-diff",
            "cargo test --config target.x86_64-unknown-linux-gnu.runner=sh",
            "cargo build --config=build.rustc-wrapper=sh",
            "pytest -p evil_plugin",
            "pytest -o addopts=-pevil",
            "go test -exec sh ./...",
            "go test -toolexec=sh ./...",
            "make test --eval=all:",
            "npm test --script-shell=sh",
            "file -C -m magic",
        ];
        let dir = tempfile::tempdir().expect("tmp");
        let policy = Policy::default();
        let answered: Vec<&str> =
            refused.iter().copied().filter(|c| policy.judge_command(c, dir.path()).is_ok()).collect();
        assert_eq!(answered, Vec::<&str>::new());
        let fine = [
            "sort -r a.txt",
            "sort -o sorted.txt a.txt",
            "sort --output=sorted.txt a.txt",
            "sort -k2 -n a.txt",
            "uniq -c a.txt",
            "uniq a.txt out.txt",
            "git diff --stat",
            "cargo test --target-dir target/other",
            "go test -run TestX ./...",
            "pytest -q tests/test_api.py",
        ];
        let refused: Vec<(&str, String)> =
            fine.iter().filter_map(|c| policy.judge_command(c, dir.path()).err().map(|e| (*c, e))).collect();
        assert_eq!(refused, Vec::<(&str, String)>::new());
    }
}
