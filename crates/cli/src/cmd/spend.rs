//! `loopwright spend`: each `[[spend]]` cap of config.toml and what its period has used so far,
//! across every process and machine sharing the store.

use super::Global;
use crate::error::CliError;

/// `loopwright spend`.
pub async fn run(global: &Global) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let store = super::open_existing_store(&ws)?;
    let caps = loopwright_app::spend::standing(&ws.config.spend, &store, jiff::Timestamp::now()).await?;
    if global.json {
        println!("{}", serde_json::to_string_pretty(&caps).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    if caps.is_empty() {
        println!("no spend caps: add [[spend]] entries to .loopwright/config.toml (period, cost_usd and/or tokens)");
        return Ok(0);
    }
    for cap in caps {
        let then = if cap.percent >= 100.0 {
            format!("used up: attempts {} until {}", if cap.on_exceed == "fail" { "fail" } else { "wait" }, cap.until)
        } else {
            format!("resets {}", cap.until)
        };
        println!("{:<44} {:>5.1}%  {}  ({then})", cap.shown, cap.percent, cap.used_words());
    }
    Ok(0)
}
