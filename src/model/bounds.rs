//! Upper bounds, in one place: the longest duration the runtime accepts from a user (flags,
//! settings, environment variables, JSON, the Rust API), and how much it reads from outside
//! (settings files, transcripts; hook output caps live with the hooks:
//! [`CompatOptions::output_cap`](crate::claude::CompatOptions::output_cap) and the `bash`
//! tool's [`OUTPUT_CAP`](crate::agent::tools::OUTPUT_CAP)).
//!
//! Durations: every timeout, grace period, cool-down and approval wait is at most
//! [`MAX_TIMEOUT`] (24 hours). Where a longer one comes from a setting, an environment variable
//! or the Rust API it is clamped (with a warning where there is a place for one); command-line
//! flags reject it with an error naming the maximum. No number given anywhere can overflow a
//! deadline.

use std::time::Duration;

/// The longest timeout (hook, handler, tool, approval), grace period or cool-down: 24 hours.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Largest settings file read: 4 MiB.
pub const MAX_SETTINGS_BYTES: u64 = 4 << 20;

/// Largest transcript file `hookbus replay` reads: 256 MiB.
pub const MAX_TRANSCRIPT_BYTES: u64 = 256 << 20;

/// Longest transcript line: 32 MiB.
pub const MAX_TRANSCRIPT_LINE_BYTES: usize = 32 << 20;

/// Reads a text file of at most `max` bytes; a larger one is an error naming the file, `what`
/// it is and the limit, read no further than the limit.
pub(crate) fn read_to_string_capped(
    path: &std::path::Path,
    max: u64,
    what: &str,
) -> Result<String, crate::Error> {
    use std::io::Read;
    let io = |message: String| crate::Error::Io {
        path: path.display().to_string(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| io(e.to_string()))?;
    if text.len() as u64 > max {
        return Err(io(format!("larger than {max} bytes, the limit for {what}")));
    }
    Ok(text)
}

/// `d`, at most [`MAX_TIMEOUT`].
pub fn clamp_timeout(d: Duration) -> Duration {
    d.min(MAX_TIMEOUT)
}

/// Why a number of seconds is not a usable timeout.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeoutError {
    /// Not a number.
    #[error("`{0}` is not a number of seconds")]
    NotANumber(String),
    /// Zero, negative, or not finite.
    #[error("`{0}` is not a positive number of seconds")]
    NotPositive(String),
    /// Longer than [`MAX_TIMEOUT`].
    #[error("{given} s is longer than the maximum of {max} s (24 hours)", max = MAX_TIMEOUT.as_secs())]
    TooLong {
        /// The number as given.
        given: String,
    },
}

impl TimeoutError {
    /// The timeout to use instead when clamping is acceptable: [`MAX_TIMEOUT`] for
    /// [`TimeoutError::TooLong`], none otherwise.
    pub fn clamped(&self) -> Option<Duration> {
        matches!(self, Self::TooLong { .. }).then_some(MAX_TIMEOUT)
    }
}

/// A timeout of `secs` seconds (fractions allowed), checked: positive, finite, at most
/// [`MAX_TIMEOUT`].
pub fn timeout_from_secs(secs: f64) -> Result<Duration, TimeoutError> {
    if !secs.is_finite() || secs <= 0.0 {
        return Err(TimeoutError::NotPositive(secs.to_string()));
    }
    if secs > MAX_TIMEOUT.as_secs_f64() {
        return Err(TimeoutError::TooLong {
            given: secs.to_string(),
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A timeout written as a number of seconds (an environment variable, a flag).
pub fn parse_timeout_secs(text: &str) -> Result<Duration, TimeoutError> {
    let t = text.trim();
    let secs: f64 = t
        .parse()
        .map_err(|_| TimeoutError::NotANumber(t.to_owned()))?;
    timeout_from_secs(secs).map_err(|e| match e {
        TimeoutError::TooLong { .. } => TimeoutError::TooLong {
            given: t.to_owned(),
        },
        TimeoutError::NotPositive(_) => TimeoutError::NotPositive(t.to_owned()),
        other => other,
    })
}

/// `now + d`, never overflowing: past the clock's range it is `now` + [`MAX_TIMEOUT`].
pub(crate) fn deadline_after(now: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(MAX_TIMEOUT))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_checked_and_huge_ones_named() {
        assert_eq!(parse_timeout_secs(" 1.5 "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_timeout_secs("86400"), Ok(MAX_TIMEOUT));
        let e = parse_timeout_secs("9223372036854775807").unwrap_err();
        assert_eq!(e.clamped(), Some(MAX_TIMEOUT));
        assert!(e.to_string().contains("maximum of 86400 s"), "{e}");
        for bad in ["0", "-1", "inf", "NaN", "1e400"] {
            let e = parse_timeout_secs(bad).unwrap_err();
            assert!(matches!(e, TimeoutError::NotPositive(_)), "{bad}: {e}");
            assert_eq!(e.clamped(), None);
        }
        assert!(matches!(
            parse_timeout_secs("ten"),
            Err(TimeoutError::NotANumber(_))
        ));
        let now = tokio::time::Instant::now();
        assert_eq!(deadline_after(now, Duration::MAX), now + MAX_TIMEOUT);
        assert_eq!(clamp_timeout(Duration::MAX), MAX_TIMEOUT);
    }
}
