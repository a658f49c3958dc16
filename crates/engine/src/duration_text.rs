//! Durations as people write them: `90s`, `30m`, `6h`, `3d`, `1h 30m`, `1.5h` (humantime's grammar), or
//! plain seconds (`1800`), read for the settings that are durations, and shown back the same way
//! (`30m`, `1h 30m`, `3d`): the largest units first, nothing below a second.

use serde_json::Value;

const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];

/// What people may write, said in refusals.
const EXAMPLES: &str = "a duration such as 90s, 30m, 6h or 3d (or a whole number of seconds)";

/// A duration in whole seconds from a JSON number (seconds) or a text (`1800`, `30m`, `1h 30m`).
pub fn parse_secs(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let text = value.as_str()?.trim();
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok();
    }
    let duration = humantime::parse_duration(text).ok()?;
    (duration.subsec_nanos() == 0).then_some(duration.as_secs())
}

/// `secs` as people write it: `0s`, `45s`, `30m`, `1h 30m`, `3d`, `1d 2h 3m 4s`.
pub fn format_secs(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut left = secs;
    let mut parts = Vec::new();
    for (size, unit) in UNITS {
        if left >= size {
            parts.push(format!("{}{unit}", left / size));
            left %= size;
        }
    }
    parts.join(" ")
}

/// Checks a duration setting: the number of seconds to store, or why it is refused (bounds said
/// in the same units people write).
pub fn check(value: &Value, min: u64, max: u64) -> Result<u64, String> {
    let secs = parse_secs(value).ok_or_else(|| format!("must be {EXAMPLES}"))?;
    if secs < min {
        return Err(format!("must be at least {}", format_secs(min)));
    }
    if secs > max {
        return Err(format!("must be at most {}", format_secs(max)));
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn people_write_units_or_plain_seconds_and_get_the_same_seconds() {
        for (written, secs) in [
            (json!(1800), 1800),
            (json!("1800"), 1800),
            (json!(" 30m "), 1800),
            (json!("6h"), 21_600),
            (json!("3d"), 259_200),
            (json!("1h 30m"), 5_400),
            (json!("1h30m"), 5_400),
            (json!("90s"), 90),
            (json!("2 days"), 172_800),
            (json!("1.5h"), 5_400),
        ] {
            assert_eq!(parse_secs(&written), Some(secs), "{written}");
        }
        for refused in [json!(""), json!("soon"), json!(-5), json!(1.5), json!("500ms"), json!(null)] {
            assert_eq!(parse_secs(&refused), None, "{refused}");
        }
    }

    #[test]
    fn durations_are_shown_back_as_people_write_them_and_read_back_the_same() {
        for (secs, shown) in
            [(0, "0s"), (45, "45s"), (60, "1m"), (1800, "30m"), (5400, "1h 30m"), (86_400, "1d"), (259_200, "3d"), (93_784, "1d 2h 3m 4s")]
        {
            assert_eq!(format_secs(secs), shown);
            assert_eq!(parse_secs(&json!(shown)), Some(secs), "{shown} reads back");
        }
    }

    #[test]
    fn refusals_say_the_bounds_in_the_units_people_write() {
        assert_eq!(check(&json!("2s"), 5, 86_400), Err("must be at least 5s".into()));
        assert_eq!(check(&json!("2d"), 5, 86_400), Err("must be at most 1d".into()));
        assert_eq!(check(&json!("soon"), 5, 86_400), Err(format!("must be {EXAMPLES}")));
        assert_eq!(check(&json!("1m"), 5, 86_400), Ok(60));
    }
}
