//! Reset times in quota messages: absolute with a time zone (`resets 8:30pm (Asia/Tokyo)`,
//! `try again at Sep 19th, 2026 7:10 AM`), relative (`in 4 days 6 hours 37 minutes`,
//! `after 2h52m39s`) and epochs (`|1749924000`).

use std::sync::LazyLock;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, Zoned};
use regex::Regex;

fn re(s: &str) -> Regex {
    Regex::new(s).expect("a valid regex")
}

static EPOCH: LazyLock<Regex> = LazyLock::new(|| re(r"\|(\d{10})\b"));
static RELATIVE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)\b(?:in|after)\s+((?:\d+\s*(?:days?|d|hours?|h|minutes?|mins?|m|seconds?|secs?|s)[\s,]*(?:and\s+)?)+)")
});
static PART: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(\d+)\s*(days?|d|hours?|h|minutes?|mins?|m|seconds?|secs?|s)"));
static ZONE: LazyLock<Regex> = LazyLock::new(|| re(r"\(([A-Za-z_]+(?:/[A-Za-z0-9_+\-]+)+|UTC|GMT)\)"));
static TIME: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)\b(\d{1,2})(?::(\d{2}))?\s*(am|pm)\b"));
static DATE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?")
});

/// How long ago a reset time of day may have passed and still be read as now.
const JUST_PASSED: SignedDuration = SignedDuration::from_hours(1);

/// When the quota a message describes resets, read from `text` at `now`; `local` is the zone
/// of times given without one. `None` when the text names no time.
pub fn reset_time(text: &str, now: Timestamp, local: &TimeZone) -> Option<Timestamp> {
    if let Some(c) = EPOCH.captures(text) {
        return Timestamp::from_second(c[1].parse().ok()?).ok();
    }
    if let Some(c) = RELATIVE.captures(text) {
        let mut secs: i64 = 0;
        for p in PART.captures_iter(&c[1]) {
            let n: i64 = p[1].parse().ok()?;
            let unit = p[2].to_ascii_lowercase();
            secs += n * match unit.chars().next() {
                Some('d') => 86_400,
                Some('h') => 3_600,
                Some('m') => 60,
                _ => 1,
            };
        }
        return now.checked_add(SignedDuration::from_secs(secs)).ok();
    }
    let time = TIME.captures(text)?;
    let zone = match ZONE.captures(text) {
        Some(z) => TimeZone::get(&z[1]).ok()?,
        None => local.clone(),
    };
    let mut hour: i8 = time[1].parse().ok()?;
    let minute: i8 = time.get(2).map_or(Some(0), |m| m.as_str().parse().ok())?;
    if !(1..=12).contains(&hour) || !(0..60).contains(&minute) {
        return None;
    }
    let pm = time[3].eq_ignore_ascii_case("pm");
    hour = match (hour, pm) {
        (12, false) => 0,
        (12, true) => 12,
        (h, true) => h + 12,
        (h, false) => h,
    };
    let at = Time::new(hour, minute, 0, 0).ok()?;
    let today: Zoned = now.to_zoned(zone.clone());
    if let Some(d) = DATE.captures(text) {
        let month = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
            .iter()
            .position(|m| d[1].eq_ignore_ascii_case(m))?;
        let day: i8 = d[2].parse().ok()?;
        let month = i8::try_from(month + 1).ok()?;
        let explicit_year: Option<i16> = d.get(3).and_then(|y| y.as_str().parse().ok());
        let year = explicit_year.unwrap_or(today.year());
        let mut when = Date::new(year, month, day).ok()?.to_datetime(at).to_zoned(zone.clone()).ok()?;
        if explicit_year.is_none() && when.timestamp() <= now {
            when = Date::new(year + 1, month, day).ok()?.to_datetime(at).to_zoned(zone).ok()?;
        }
        return Some(when.timestamp());
    }
    // A time of day with no date is the next one — unless it passed within the hour: the
    // message was drawn before its reset and read a little late (the dashboard must not say
    // "continue in 23h 53m" for a reset seven minutes ago).
    let when = today.date().to_datetime(at).to_zoned(zone.clone()).ok()?;
    if when.timestamp() <= now {
        if now.duration_since(when.timestamp()) <= JUST_PASSED {
            return Some(now);
        }
        return Some(today.date().tomorrow().ok()?.to_datetime(at).to_zoned(zone).ok()?.timestamp());
    }
    Some(when.timestamp())
}
