//! The people who may use the daemon (SPEC §9 "Team access"): each has a name, a role and a
//! token of their own. Tokens are kept only as SHA-256 hashes in `.loopwright/state/people.json`
//! (0600): the file says who may do what, never how to sign in as them. A token is shown once,
//! when it is created. Changes take a lock on `people.lock` and replace the file whole, so two
//! commands at once never lose each other's person.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::workspace::Workspace;

/// What a person may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads everything, changes nothing.
    Viewer,
    /// Also answers gates and escalations, starts, re-runs, resumes and cancels runs, answers
    /// an auto loop's prompts.
    Approver,
    /// Also starts and stops auto loops (which launch agents).
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Approver, Role::Admin];

    /// The role's name (`viewer`, `approver`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }

    /// Parses a role's name.
    pub fn parse(text: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// True when this role may answer and change runs.
    pub fn may_answer(self) -> bool {
        self >= Role::Approver
    }
}

/// One person, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// Their name, as answers are journaled under.
    pub name: String,
    /// What they may do.
    pub role: Role,
    /// The SHA-256 of their token, in hex.
    pub token_sha256: String,
    /// When the token was created.
    pub created_at: jiff::Timestamp,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    people: Vec<Person>,
}

/// Where the people of `ws` are kept.
pub fn path(ws: &Workspace) -> PathBuf {
    ws.state_dir().join("people.json")
}

/// The SHA-256 of `token`, in hex.
pub fn token_hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token: 48 hex digits (192 bits) after `lwp_`, so one is told from the
/// workspace's token at a glance.
pub fn new_token() -> Result<String, Error> {
    let mut bytes = [0u8; 24];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| Error::Internal(anyhow::anyhow!("the system's random source failed")))?;
    Ok(format!("lwp_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// Reads the people kept at `file` (none when there is no file).
pub fn load(file: &Path) -> Result<Vec<Person>, Error> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str::<File>(&text)
            .map(|f| f.people)
            .map_err(|e| Error::usage(format!("{}: not a list of people ({e})", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::usage(format!("cannot read {}: {e}", file.display()))),
    }
}

/// The person whose token is `token`, among `people`.
pub fn find<'a>(people: &'a [Person], token: &str) -> Option<&'a Person> {
    let hash = token_hash(token);
    people.iter().find(|p| same(&p.token_sha256, &hash))
}

/// Compares two secrets without stopping at the first difference.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a person's name: 1 to 64 characters, letters, digits and `. _ @ -`, so it reads the
/// same in a journal line, a header and a link.
pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = (1..=64).contains(&name.chars().count())
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::usage(format!("the name `{name}`: expected 1 to 64 letters, digits, `.`, `_`, `@` or `-`")))
    }
}

/// Runs `change` on the people of `ws` under the lock, and writes what it returns.
fn change<T>(ws: &Workspace, change: impl FnOnce(&mut Vec<Person>) -> Result<T, Error>) -> Result<T, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = ws.state_dir();
    std::fs::create_dir_all(&dir).map_err(|e| Error::usage(format!("cannot create {}: {e}", dir.display())))?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(dir.join("people.lock"))
        .map_err(|e| Error::usage(format!("cannot open {}: {e}", dir.join("people.lock").display())))?;
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::Internal(anyhow::anyhow!("cannot lock people.lock: {e}")))?;
    let file = path(ws);
    let mut people = load(&file)?;
    let out = change(&mut people)?;
    let text = serde_json::to_string_pretty(&File { people }).map_err(|e| Error::Internal(e.into()))?;
    crate::workspace::write_atomic_private(&file, &text)
        .map_err(|e| Error::usage(format!("cannot write {}: {e}", file.display())))?;
    Ok(out)
}

/// Creates a person with a new token, returned once (only its hash is kept). A name already
/// taken is a conflict: revoke it first.
pub fn create(ws: &Workspace, name: &str, role: Role) -> Result<(Person, String), Error> {
    check_name(name)?;
    let token = new_token()?;
    let person =
        Person { name: name.to_owned(), role, token_sha256: token_hash(&token), created_at: jiff::Timestamp::now() };
    change(ws, |people| {
        if people.iter().any(|p| p.name == name) {
            return Err(Error::conflict(format!(
                "`{name}` already has a token: `loopwright serve token revoke {name}` first"
            )));
        }
        people.push(person.clone());
        Ok(())
    })?;
    Ok((person, token))
}

/// The people of `ws`, oldest first.
pub fn list(ws: &Workspace) -> Result<Vec<Person>, Error> {
    load(&path(ws))
}

/// Revokes `name`'s token: from the next request on, it signs in as nobody.
pub fn revoke(ws: &Workspace, name: &str) -> Result<Person, Error> {
    change(ws, |people| {
        let at = people.iter().position(|p| p.name == name).ok_or_else(|| {
            Error::not_found(format!("nobody named `{name}` has a token (`loopwright serve token list`)"))
        })?;
        Ok(people.remove(at))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace { root: dir.path().to_owned(), config: Default::default() };
        (dir, ws)
    }

    #[test]
    fn a_token_is_kept_only_as_its_hash_and_finds_its_person_until_revoked() {
        let (_dir, ws) = workspace();
        let (carol, token) = create(&ws, "carol", Role::Approver).expect("create");
        let (_, other) = create(&ws, "dan", Role::Viewer).expect("create");
        let stored = std::fs::read_to_string(path(&ws)).expect("file");
        assert!(!stored.contains(&token) && stored.contains(&carol.token_sha256), "{stored}");
        let people = list(&ws).expect("list");
        assert_eq!(find(&people, &token), Some(&carol));
        assert_eq!(find(&people, &other).map(|p| p.role), Some(Role::Viewer));
        assert_eq!(find(&people, "lwp_not-a-token"), None);
        assert!(matches!(create(&ws, "carol", Role::Admin), Err(Error::Conflict(_))));
        assert_eq!(revoke(&ws, "carol").expect("revoke"), carol);
        assert_eq!(find(&list(&ws).expect("list"), &token), None);
        assert!(matches!(revoke(&ws, "carol"), Err(Error::NotFound(_))));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(path(&ws)).expect("meta").permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn names_are_plain_words() {
        for bad in ["", "a b", "carol\n", "<b>", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["carol", "carol.smith@example.com", "ops-bot_2"] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }
}
