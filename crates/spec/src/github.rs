//! `[github]` in config.toml: the repository loopwright works in on GitHub, how it signs in,
//! what may start a run there and what happens to the pull request it opens (SPEC §14).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::sandbox::SandboxMode;

/// `[github]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    /// `OWNER/NAME`: the one repository whose issues start runs and which receives their pull
    /// requests. Deliveries about any other repository are ignored.
    pub repo: String,
    /// The REST API's root: `https://api.github.com`, or `https://HOST/api/v3` for GitHub
    /// Enterprise Server.
    #[serde(default = "GithubConfig::default_api_url")]
    pub api_url: String,
    /// The environment variable holding a personal or fine-grained token (instead of an App).
    #[serde(default)]
    pub token_env: Option<String>,
    /// A GitHub App's id (with `private_key_file` and `installation_id`).
    #[serde(default)]
    pub app_id: Option<u64>,
    /// The App's private key (PEM), read when a token is needed.
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// The App's installation on `repo`'s owner.
    #[serde(default)]
    pub installation_id: Option<u64>,
    /// The environment variable holding the webhook's secret; deliveries must be signed with it.
    #[serde(default = "GithubConfig::default_webhook_secret_env")]
    pub webhook_secret_env: String,
    /// Look for triggers and CI results by polling every this many seconds (none: webhooks
    /// only).
    #[serde(default)]
    pub poll_seconds: Option<u64>,
    /// The least a person's permission on `repo` must be for their label, command, review or
    /// answer to count (a trigger may ask for more or less).
    #[serde(default)]
    pub min_permission: Permission,
    /// How many times a red CI run is fed back before the run escalates.
    #[serde(default = "GithubConfig::default_ci_retries")]
    pub ci_retries: u32,
    /// What happens once the required checks pass and the pull request is approved.
    #[serde(default)]
    pub merge: MergePolicy,
    /// How loopwright merges when it does.
    #[serde(default)]
    pub merge_method: MergeMethod,
    /// Open pull requests as drafts and mark them ready when their CI passes.
    #[serde(default)]
    pub draft_until_green: bool,
    /// Keep the run open while its pull request's CI and reviews come in (false: the run
    /// succeeds when the pull request is opened).
    #[serde(default = "GithubConfig::default_watch")]
    pub watch: bool,
    /// The sandbox of runs started from GitHub.
    #[serde(default = "GithubConfig::default_sandbox")]
    pub sandbox: SandboxMode,
    /// Bot accounts (`name[bot]`) whose commands count; other bots never start anything.
    #[serde(default)]
    pub bots: Vec<String>,
    /// Whether a command on a pull request from a fork may start a run (sandboxed, required).
    #[serde(default)]
    pub forks: bool,
    /// A delivery whose trigger is older than this is refused (a re-sent body starts nothing).
    #[serde(default = "GithubConfig::default_max_delivery_age_minutes")]
    pub max_delivery_age_minutes: u64,
    /// `[[github.trigger]]`: what starts a run.
    #[serde(default)]
    pub trigger: Vec<Trigger>,
}

impl GithubConfig {
    fn default_api_url() -> String {
        "https://api.github.com".to_owned()
    }
    fn default_webhook_secret_env() -> String {
        "LOOPWRIGHT_GITHUB_WEBHOOK_SECRET".to_owned()
    }
    fn default_ci_retries() -> u32 {
        2
    }
    fn default_watch() -> bool {
        true
    }
    fn default_sandbox() -> SandboxMode {
        SandboxMode::Required
    }
    fn default_max_delivery_age_minutes() -> u64 {
        10
    }

    /// `repo` split into owner and name, when it is written `OWNER/NAME`.
    pub fn owner_and_name(&self) -> Option<(&str, &str)> {
        let (owner, name) = self.repo.split_once('/')?;
        let ok = |s: &str| {
            !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) && s != ".."
        };
        (ok(owner) && ok(name) && owner != ".").then_some((owner, name))
    }

    /// How loopwright signs in, as written.
    pub fn auth(&self) -> Option<AuthConfig<'_>> {
        match (&self.token_env, self.app_id, &self.private_key_file, self.installation_id) {
            (Some(env), None, None, None) => Some(AuthConfig::Token { env }),
            (None, Some(app_id), Some(key_file), Some(installation_id)) => {
                Some(AuthConfig::App { app_id, key_file, installation_id })
            }
            _ => None,
        }
    }

    /// Every problem of the section, each with the key it is about.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.owner_and_name().is_none() {
            problems.push(("repo", format!("`repo` `{}`: expected OWNER/NAME", self.repo)));
        }
        let api = self.api_url.to_ascii_lowercase();
        if !(api.starts_with("https://") || api.starts_with("http://")) || self.api_url.contains(char::is_whitespace) {
            problems.push((
                "api_url",
                format!("`api_url` `{}`: expected an https:// URL such as https://HOST/api/v3", self.api_url),
            ));
        }
        if self.auth().is_none() {
            problems.push((
                "token_env",
                "sign-in: expected either `token_env` or all three of `app_id`, `private_key_file` and \
                 `installation_id`"
                    .to_owned(),
            ));
        }
        if self.poll_seconds == Some(0) {
            problems.push(("poll_seconds", "`poll_seconds` must be 1 or more".to_owned()));
        }
        if !(1..=24 * 60).contains(&self.max_delivery_age_minutes) {
            problems.push(("max_delivery_age_minutes", "`max_delivery_age_minutes` must be 1 to 1440".to_owned()));
        }
        for bot in &self.bots {
            if !bot.ends_with("[bot]") {
                problems.push(("bots", format!("`bots` entry `{bot}`: expected an App's login, `NAME[bot]`")));
            }
        }
        problems
    }
}

/// How loopwright signs in to GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthConfig<'a> {
    /// A token read from this environment variable.
    Token {
        /// The variable's name.
        env: &'a str,
    },
    /// A GitHub App's installation.
    App {
        /// The App's id.
        app_id: u64,
        /// Its private key (PEM).
        key_file: &'a str,
        /// The installation.
        installation_id: u64,
    },
}

/// One `[[github.trigger]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    /// What starts it.
    pub on: TriggerOn,
    /// The label (`on = "issue_labeled"`).
    #[serde(default)]
    pub label: Option<String>,
    /// The comment's first word (`on = "issue_comment"`).
    #[serde(default = "Trigger::default_command")]
    pub command: String,
    /// The pipeline it runs (a command may name another).
    #[serde(default)]
    pub pipeline: Option<String>,
    /// Variables given to the run (a command's `--var K=V` adds to them).
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// The least permission the person who labelled or commented must have (default: the
    /// section's).
    #[serde(default)]
    pub min_permission: Option<Permission>,
}

impl Trigger {
    fn default_command() -> String {
        "/loopwright".to_owned()
    }
}

/// What a trigger answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerOn {
    /// An issue given `label`.
    IssueLabeled,
    /// A comment `/loopwright run PIPELINE [--var K=V]…` on an issue or a pull request.
    IssueComment,
}

/// A person's permission on the repository, from the least to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// No access.
    None,
    /// Read.
    Read,
    /// Triage.
    Triage,
    /// Write.
    #[default]
    Write,
    /// Maintain.
    Maintain,
    /// Admin.
    Admin,
}

impl Permission {
    /// Every permission with its name, least first.
    pub const ALL: [(&'static str, Permission); 6] = [
        ("none", Permission::None),
        ("read", Permission::Read),
        ("triage", Permission::Triage),
        ("write", Permission::Write),
        ("maintain", Permission::Maintain),
        ("admin", Permission::Admin),
    ];

    /// Parses a role's name as GitHub writes it.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, p)| *p)
    }

    /// The name as written.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, p)| *p == self).map_or("none", |(n, _)| n)
    }
}

/// `merge = …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MergePolicy {
    /// A person merges.
    #[default]
    Off,
    /// loopwright merges (or enables auto-merge) once the required checks pass and a person
    /// approved the tested head.
    Auto,
}

/// `merge_method = …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MergeMethod {
    /// A merge commit.
    Merge,
    /// One squashed commit.
    #[default]
    Squash,
    /// The commits rebased.
    Rebase,
}

impl MergeMethod {
    /// As GitHub's API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            MergeMethod::Merge => "merge",
            MergeMethod::Squash => "squash",
            MergeMethod::Rebase => "rebase",
        }
    }
}

impl Trigger {
    /// Every problem of this trigger, each with the key it is about.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        match self.on {
            TriggerOn::IssueLabeled => {
                if self.label.as_deref().is_none_or(|l| l.trim().is_empty()) {
                    problems.push(("on", "an `issue_labeled` trigger needs a `label`".to_owned()));
                }
                if self.pipeline.is_none() {
                    problems.push(("on", "an `issue_labeled` trigger needs the `pipeline` it runs".to_owned()));
                }
            }
            TriggerOn::IssueComment => {
                if !self.command.starts_with('/')
                    || self.command.len() < 2
                    || self.command.contains(char::is_whitespace)
                {
                    problems.push((
                        "command",
                        format!("`command` `{}`: expected one word starting with `/`", self.command),
                    ));
                }
                if self.label.is_some() {
                    problems.push(("label", "`label` is for `issue_labeled` triggers".to_owned()));
                }
            }
        }
        for name in self.vars.keys() {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                problems.push(("vars", format!("variable `{name}`: expected letters, digits and `_`")));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::diag::SourceFile;

    #[test]
    fn a_github_section_is_read_with_its_defaults() {
        let text = "[github]\nrepo = \"acme/shop\"\ntoken_env = \"GITHUB_TOKEN\"\n\n[[github.trigger]]\non = \"issue_labeled\"\nlabel = \"loopwright\"\npipeline = \"fix-issue\"\n\n[[github.trigger]]\non = \"issue_comment\"\nvars = { area = \"api\" }\nmin_permission = \"maintain\"\n";
        let config = Config::parse(&SourceFile::new("config.toml", text)).expect("ok");
        let github = config.github.expect("github");
        assert_eq!(github.owner_and_name(), Some(("acme", "shop")));
        assert_eq!(github.auth(), Some(AuthConfig::Token { env: "GITHUB_TOKEN" }));
        assert_eq!(github.api_url, "https://api.github.com");
        assert_eq!(github.sandbox, SandboxMode::Required);
        assert_eq!((github.ci_retries, github.watch, github.max_delivery_age_minutes), (2, true, 10));
        assert_eq!(
            (github.merge, github.merge_method, github.min_permission),
            (MergePolicy::Off, MergeMethod::Squash, Permission::Write)
        );
        assert_eq!(
            github.trigger,
            [
                Trigger {
                    on: TriggerOn::IssueLabeled,
                    label: Some("loopwright".into()),
                    command: "/loopwright".into(),
                    pipeline: Some("fix-issue".into()),
                    vars: BTreeMap::new(),
                    min_permission: None,
                },
                Trigger {
                    on: TriggerOn::IssueComment,
                    label: None,
                    command: "/loopwright".into(),
                    pipeline: None,
                    vars: BTreeMap::from([("area".into(), "api".into())]),
                    min_permission: Some(Permission::Maintain),
                },
            ]
        );
    }

    #[test]
    fn each_problem_of_the_github_section_is_said_where_it_is_written() {
        let text = "[github]\nrepo = \"acme\"\napi_url = \"ftp://x\"\ntoken_env = \"T\"\napp_id = 3\npoll_seconds = 0\nbots = [\"dependabot\"]\n\n[[github.trigger]]\non = \"issue_labeled\"\n\n[[github.trigger]]\non = \"issue_comment\"\ncommand = \"loopwright\"\n";
        let diags = Config::parse(&SourceFile::new("config.toml", text)).expect_err("bad");
        let mut located = crate::diag::located(&diags);
        located.sort();
        assert_eq!(
            located,
            [
                "10:6: github.trigger[0].on: [[github.trigger]] an `issue_labeled` trigger needs a `label`",
                "10:6: github.trigger[0].on: [[github.trigger]] an `issue_labeled` trigger needs the `pipeline` it runs",
                "14:11: github.trigger[1].command: [[github.trigger]] `command` `loopwright`: expected one word starting with `/`",
                "2:8: github.repo: [github] `repo` `acme`: expected OWNER/NAME",
                "3:11: github.api_url: [github] `api_url` `ftp://x`: expected an https:// URL such as https://HOST/api/v3",
                "4:13: github.token_env: [github] sign-in: expected either `token_env` or all three of `app_id`, `private_key_file` and `installation_id`",
                "6:16: github.poll_seconds: [github] `poll_seconds` must be 1 or more",
                "7:8: github.bots: [github] `bots` entry `dependabot`: expected an App's login, `NAME[bot]`",
            ]
        );
    }

    #[test]
    fn permissions_are_ordered_least_first() {
        assert!(Permission::Read < Permission::Triage && Permission::Triage < Permission::Write);
        assert!(Permission::Write < Permission::Maintain && Permission::Maintain < Permission::Admin);
        for (name, p) in Permission::ALL {
            assert_eq!((Permission::parse(name), p.as_str()), (Some(p), name));
        }
    }

    #[test]
    fn an_app_signs_in_with_all_three_of_its_settings() {
        let text = "[github]\nrepo = \"a/b\"\napp_id = 7\nprivate_key_file = \"key.pem\"\ninstallation_id = 9\n";
        let github = Config::parse(&SourceFile::new("c", text)).expect("ok").github.expect("github");
        assert_eq!(github.auth(), Some(AuthConfig::App { app_id: 7, key_file: "key.pem", installation_id: 9 }));
    }
}
