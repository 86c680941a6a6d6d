//! Asciicast v2, as the gateway records terminals: a header line (`{"version": 2,
//! "width", "height", …}`), then one event a line, `[seconds, code, data]` — `o` what
//! the terminal showed, `i` what was typed, `r` a resize.

use std::time::Duration;

use serde_json::Value;

/// A recording's header, as far as playing it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Columns.
    pub width: u64,
    /// Rows.
    pub height: u64,
}

/// Reads the header line; anything but version 2 is not played.
pub fn header(line: &str) -> Result<Header, String> {
    let v: Value = serde_json::from_str(line)
        .map_err(|e| format!("not an asciicast recording (its first line: {e})"))?;
    if v.get("version").and_then(Value::as_u64) != Some(2) {
        return Err("not an asciicast v2 recording".into());
    }
    let size = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    Ok(Header {
        width: size("width"),
        height: size("height"),
    })
}

/// Reads an event line: `Some((seconds, output))` for what the terminal showed, `None`
/// for input and resizes.
pub fn output(line: &str) -> Result<Option<(f64, String)>, String> {
    let bad = || {
        format!(
            "not an asciicast event: {}",
            line.chars().take(80).collect::<String>()
        )
    };
    let v: Value = serde_json::from_str(line).map_err(|_| bad())?;
    let [at, code, data] = v.as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(bad());
    };
    let at = at
        .as_f64()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(bad)?;
    match (code.as_str(), data.as_str()) {
        (Some("o"), Some(text)) => Ok(Some((at, text.to_owned()))),
        (Some(_), Some(_)) => Ok(None),
        _ => Err(bad()),
    }
}

/// How long to wait between an event at `last` and the next at `at` (seconds into the
/// recording), played `speed` times as fast. Events out of order wait nothing.
pub fn pause(last: f64, at: f64, speed: f64) -> Duration {
    let gap = (at - last) / speed;
    if gap.is_finite() && gap > 0.0 {
        Duration::from_secs_f64(gap)
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_header_is_read_and_others_are_refused() {
        assert_eq!(
            header(r#"{"version": 2, "width": 80, "height": 24, "timestamp": 1}"#),
            Ok(Header {
                width: 80,
                height: 24
            })
        );
        for bad in [r#"{"version": 1}"#, "[1, \"o\", \"x\"]", "", "{"] {
            assert!(header(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn output_events_are_played_and_input_and_resizes_skipped() {
        assert_eq!(
            output(r#"[1.5, "o", "hi\r\n"]"#),
            Ok(Some((1.5, "hi\r\n".into())))
        );
        assert_eq!(output(r#"[2, "i", "ls\r"]"#), Ok(None));
        assert_eq!(output(r#"[3.0, "r", "80x24"]"#), Ok(None));
        for bad in [
            r#"[1, "o"]"#,
            r#"[-1, "o", "x"]"#,
            r#"["1", "o", "x"]"#,
            r#"[1, 2, "x"]"#,
            "x",
        ] {
            assert!(output(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pace_is_the_recordings_divided_by_the_speed() {
        assert_eq!(pause(1.0, 3.0, 1.0), Duration::from_secs(2));
        assert_eq!(pause(1.0, 3.0, 4.0), Duration::from_millis(500));
        assert_eq!(pause(3.0, 1.0, 1.0), Duration::ZERO);
        assert_eq!(pause(0.0, 1.0, f64::INFINITY), Duration::ZERO);
    }
}
