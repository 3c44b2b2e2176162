//! How a module declares its settings: a struct of its own that derives
//! `clap::Args`, one field per setting. That field is the setting's one
//! declaration — its `long` name is the flag (`--KEY`), the file key (`KEY`,
//! or `KEY` of a `[table]` for a `TABLE-KEY` flag) and, given at start-up,
//! the environment variable (`VERDICT_KEY`); its doc comment is the help
//! and the README's text; its `default_value` the default, which
//! [`defaults`] reads back for the struct's `Default`. Start-up
//! ([`crate::config`]) composes the modules' structs into one command.
//!
//! The value parsers here turn a setting's text into its value in the
//! units the code uses (milliseconds into a `Duration`, MiB into bytes).

use std::time::Duration;

/// A settings struct with every field at its declared default (the
/// environment is not read).
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = command
        .try_get_matches_from(std::iter::empty::<&str>())
        .expect("every setting has a default or is optional");
    T::from_arg_matches(&matches).expect("the defaults parse")
}

fn number(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number"))
}

/// Milliseconds, 0 included.
pub(crate) fn millis(text: &str) -> Result<Duration, String> {
    number(text).map(Duration::from_millis)
}

/// Milliseconds, at least 1.
pub(crate) fn positive_millis(text: &str) -> Result<Duration, String> {
    positive(text).map(|n| Duration::from_millis(n as u64))
}

/// A count, at least 1.
pub(crate) fn positive(text: &str) -> Result<usize, String> {
    match number(text)? {
        0 => Err("must be at least 1".into()),
        n => usize::try_from(n).map_err(|_| format!("{n} is out of range")),
    }
}

/// MiB, as bytes (at least 1 MiB).
pub(crate) fn mib(text: &str) -> Result<usize, String> {
    scaled(text, 20)
}

/// KiB, as bytes (at least 1 KiB).
pub fn kib(text: &str) -> Result<usize, String> {
    scaled(text, 10)
}

fn scaled(text: &str, shift: u32) -> Result<usize, String> {
    let n = positive(text)?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{n} is out of range"))
}

/// A share from 0 to 1 (`0.25`).
pub fn share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(n) if (0.0..=1.0).contains(&n) => Ok(n),
        _ => Err(format!("`{text}` is not a share from 0 to 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_convert_and_bounds_hold() {
        assert_eq!(millis("0"), Ok(Duration::ZERO));
        assert_eq!(positive_millis("250"), Ok(Duration::from_millis(250)));
        assert!(positive_millis("0").unwrap_err().contains("at least 1"));
        assert_eq!(mib("64"), Ok(64 << 20));
        assert_eq!(kib("1024"), Ok(1 << 20));
        assert!(
            mib(&u64::MAX.to_string())
                .unwrap_err()
                .contains("out of range")
        );
        assert!(millis("soon").unwrap_err().contains("`soon`"));
    }
}
