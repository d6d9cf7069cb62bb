//! The built-in patterns the engine's own rules and texts name. A project's patterns are open
//! ids (strings from its file); these are the ones loopwright itself acts on, so they are an
//! enum, and a test holds each to a pattern of `builtin.yml`.

/// A pattern of the built-in library that loopwright's own code names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `permission-error`.
    PermissionError,
    /// `disk-full`.
    DiskFull,
    /// `merge-conflict`.
    MergeConflict,
    /// `git-error`.
    GitError,
    /// `syntax-error`.
    SyntaxError,
    /// `type-error`.
    TypeError,
    /// `undefined-name`.
    UndefinedName,
    /// `import-not-found`.
    ImportNotFound,
    /// `dependency-conflict`.
    DependencyConflict,
    /// `command-not-found`.
    CommandNotFound,
    /// `test-failure`.
    TestFailure,
    /// `regression-detected`: what the regression gate classifies, never offered to an agent.
    RegressionDetected,
    /// `lint-error`.
    LintError,
    /// `format-error`.
    FormatError,
    /// `timeout`.
    Timeout,
    /// `network-error`.
    NetworkError,
    /// `rate-limit`.
    RateLimit,
}

impl Builtin {
    /// Every one.
    pub const ALL: [Self; 17] = [
        Self::PermissionError,
        Self::DiskFull,
        Self::MergeConflict,
        Self::GitError,
        Self::SyntaxError,
        Self::TypeError,
        Self::UndefinedName,
        Self::ImportNotFound,
        Self::DependencyConflict,
        Self::CommandNotFound,
        Self::TestFailure,
        Self::RegressionDetected,
        Self::LintError,
        Self::FormatError,
        Self::Timeout,
        Self::NetworkError,
        Self::RateLimit,
    ];

    /// Its id in the library.
    pub fn id(self) -> &'static str {
        match self {
            Self::PermissionError => "permission-error",
            Self::DiskFull => "disk-full",
            Self::MergeConflict => "merge-conflict",
            Self::GitError => "git-error",
            Self::SyntaxError => "syntax-error",
            Self::TypeError => "type-error",
            Self::UndefinedName => "undefined-name",
            Self::ImportNotFound => "import-not-found",
            Self::DependencyConflict => "dependency-conflict",
            Self::CommandNotFound => "command-not-found",
            Self::TestFailure => "test-failure",
            Self::RegressionDetected => "regression-detected",
            Self::LintError => "lint-error",
            Self::FormatError => "format-error",
            Self::Timeout => "timeout",
            Self::NetworkError => "network-error",
            Self::RateLimit => "rate-limit",
        }
    }

    /// The built-in pattern with id `id`, if loopwright names it.
    pub fn of(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.id() == id)
    }
}

impl std::fmt::Display for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.id())
    }
}
