//! Time as the host and its plugins count it — milliseconds since the Unix
//! epoch ([`Timestamp`]) — and as RFC 3339 text.

use std::time::{Duration, SystemTime};

/// Milliseconds since the Unix epoch: the WIT `timestamp` (an `s64`), which
/// the plugin bindings name the same.
pub type Timestamp = i64;

/// The present.
pub fn now() -> Timestamp {
    millis(SystemTime::now())
}

/// A time in milliseconds since the epoch (0 before it).
pub(crate) fn millis(time: SystemTime) -> Timestamp {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Timestamp)
}

/// The latest time that both RFC 3339 text and Kubernetes' time type hold
/// (9999-12-30T22:00:00Z).
const LAST_RFC3339_MS: Timestamp = 253_402_207_200_000;

/// Time as RFC 3339 text; times outside what it can write are written as
/// its first or last one.
pub(crate) fn rfc3339(at: Timestamp) -> String {
    let at = at.clamp(0, LAST_RFC3339_MS);
    let time = SystemTime::UNIX_EPOCH + Duration::from_millis(at as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

/// Parse RFC 3339 text (`2026-01-01T00:00:00Z`, `2026-12-20T00:00:00+01:00`,
/// with or without fractions of a second) into milliseconds. A time
/// without an offset is refused: it could be any time zone's.
pub(crate) fn parse_time(text: &str) -> Result<Timestamp, String> {
    let trimmed = text.trim();
    let time: jiff::Timestamp = trimmed.parse().map_err(|e: jiff::Error| {
        if trimmed.parse::<jiff::civil::DateTime>().is_ok() {
            format!(
                "`{text}` has no offset: say which time zone it is in (`{trimmed}Z` for UTC, or an offset such as `{trimmed}+01:00`)"
            )
        } else {
            format!("`{text}` is not an RFC 3339 time: {e}")
        }
    })?;
    let at = time.as_millisecond();
    if at < 0 {
        return Err(format!("`{text}` is before 1970"));
    }
    Ok(at)
}

/// Times in JSON as RFC 3339 text with milliseconds
/// (`#[serde(serialize_with = "crate::time::serialize_time")]`).
pub(crate) fn serialize_time<S: serde::Serializer>(
    time: &SystemTime,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_rfc3339_millis(*time))
}

/// Serde of a [`Timestamp`] as RFC 3339 text (`#[serde(with =
/// "crate::time::text")]`).
pub(crate) mod text {
    use super::Timestamp;

    pub fn serialize<S: serde::Serializer>(at: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(*at))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        super::parse_time(&text).map_err(serde::de::Error::custom)
    }
}

/// Serde of an optional [`Timestamp`] as RFC 3339 text or `null`.
pub(crate) mod text_opt {
    use super::Timestamp;

    pub fn serialize<S: serde::Serializer>(
        at: &Option<Timestamp>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match at {
            Some(at) => s.serialize_some(&super::rfc3339(*at)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Timestamp>, D::Error> {
        let text = <Option<std::borrow::Cow<'de, str>> as serde::Deserialize>::deserialize(d)?;
        text.map(|t| super::parse_time(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rfc3339_time_reads_and_one_without_an_offset_is_refused() {
        let utc = parse_time("2026-12-19T23:00:00Z").unwrap();
        assert_eq!(parse_time("2026-12-20T00:00:00+01:00").unwrap(), utc);
        assert_eq!(parse_time("2026-12-19T18:00:00-05:00").unwrap(), utc);
        assert_eq!(parse_time("2026-12-19T23:00:00.000+00:00").unwrap(), utc);
        assert_eq!(parse_time("2026-12-19t23:00:00z").unwrap(), utc);
        assert_eq!(parse_time("2026-12-19T23:00:00.250Z").unwrap(), utc + 250);
        let bare = parse_time("2026-12-20T00:00:00").unwrap_err();
        assert!(bare.contains("no offset"), "{bare}");
        assert!(
            parse_time("yesterday")
                .unwrap_err()
                .contains("not an RFC 3339 time")
        );
        assert!(
            parse_time("1969-12-31T23:59:59Z")
                .unwrap_err()
                .contains("before 1970")
        );
    }
}
