//! `loopwright doctor`: what the machine offers for sandboxes and which agent CLIs it has.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::Ws;

#[test]
fn doctor_says_what_is_missing_and_how_to_install_it() {
    let ws = Ws::empty();
    // A PATH with a `claude` and nothing else: no bubblewrap, no other CLI.
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho 1.0\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = ws.cmd().args(["doctor", "--json"]).env("PATH", &bin).output().expect("doctor");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        report["sandbox"],
        json!({"available": false, "bubblewrap": {"missing": "bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap`"},
               "namespaces": "not tried: no bubblewrap", "overlay": "not tried: no bubblewrap"})
    );
    let agents: Vec<(String, Option<String>)> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| (a["name"].as_str().unwrap_or_default().to_owned(), a["path"].as_str().map(str::to_owned)))
        .collect();
    assert_eq!(agents[0], ("claude".to_owned(), Some(claude.display().to_string())));
    assert!(agents[1..].iter().all(|(_, p)| p.is_none()), "{agents:?}");
}
