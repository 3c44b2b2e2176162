//! Commands against a running host, over its HTTP API and one client
//! ([`client`]): [`kubectl`], the
//! kubectl plugin, and `verdict history`, which prints an app's (or an instance's) status changes, the marks of what
//! happened meanwhile and, when asked, its availability — as a table for
//! people in a terminal or as the API's JSON for scripts.

pub(crate) mod client;
pub mod kubectl;

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// How `verdict history` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// `verdict history`.
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryArgs {
    /// The app, `namespace/name`.
    pub app: String,
    /// One instance of it instead (a pod's or an object's name).
    #[arg(long, value_name = "NAME")]
    pub instance: Option<String>,
    /// The host's URL.
    #[arg(
        long,
        env = "VERDICT_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// A bearer token that may read, when the host asks for one.
    #[arg(
        long,
        env = "VERDICT_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Changes that began at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Changes that began before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// At most this many changes, newest first.
    #[arg(long, value_name = "N", default_value = "50")]
    pub limit: usize,
    /// Also the availability over this window (`7d`, `24h`, `90m`).
    #[arg(long, value_name = "WINDOW")]
    pub availability: Option<String>,
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    pub output: Output,
}

/// GET a path of the host, as JSON, through the terminal's one client
/// ([`client::Client`]); an answer that is not 2xx is the API's error
/// message.
fn get(args: &HistoryArgs, path: &str, query: &[(&str, String)]) -> Result<Value> {
    let client = client::Client::direct(&args.url, args.token.clone())?;
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    let path = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    };
    client.get(&path)
}

pub(crate) use crate::fleet::members::segment;

/// What `verdict history` prints.
pub fn history(args: &HistoryArgs) -> Result<String> {
    let (namespace, name) = args
        .app
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| Error::Config {
            key: "app",
            message: format!("`{}` is not `namespace/name`", args.app),
        })?;
    let app = format!("/v1/apps/{}/{}", segment(namespace), segment(name));
    let path = match &args.instance {
        Some(instance) => format!("{app}/instances/{}/history", segment(instance)),
        None => format!("{app}/history"),
    };
    let mut query = vec![("limit", args.limit.to_string())];
    query.extend(args.since.clone().map(|s| ("since", s)));
    query.extend(args.until.clone().map(|u| ("until", u)));
    let page = get(args, &path, &query)?;
    let availability = match &args.availability {
        Some(window) => Some(get(
            args,
            &format!("{app}/availability"),
            &[("window", window.clone())],
        )?),
        None => None,
    };
    Ok(match args.output {
        Output::Json => {
            let mut out = json!({"history": page});
            if let Some(a) = availability {
                out["availability"] = a;
            }
            format!("{out:#}\n")
        }
        Output::Table => table(&page, availability.as_ref()),
    })
}

/// How long from `at` to `until` (or to now), as people say it.
pub(crate) fn lasted(at: &str, until: Option<&str>) -> String {
    let parse = |t: &str| crate::time::parse_time(t).ok();
    let end = until.and_then(parse).unwrap_or_else(crate::time::now);
    match parse(at) {
        Some(start) if end >= start => {
            let seconds = ((end - start) / 1000) as u64;
            humantime::format_duration(std::time::Duration::from_secs(seconds)).to_string()
        }
        _ => String::new(),
    }
}

/// What caused a history entry, `kind id`, when it says.
pub(crate) fn cause(entry: &Value) -> String {
    match (
        entry["cause"]["kind"].as_str(),
        entry["cause"]["id"].as_str(),
    ) {
        (Some(kind), Some(id)) => format!("{kind} {id}"),
        _ => String::new(),
    }
}

/// Rows of text in columns as wide as their widest cell.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let width = |i: usize| {
        rows.iter()
            .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len)).map(width).collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn table(page: &Value, availability: Option<&Value>) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut rows = vec![
        ["SINCE", "FOR", "STATUS", "SHOWN", "CAUSE", "REASON"]
            .map(String::from)
            .to_vec(),
    ];
    for e in page["entries"].as_array().into_iter().flatten() {
        let mut status = text(&e["status"]);
        if let Some(t) = e["transitional"].as_str() {
            status = format!("{status} ({t})");
        }
        let flaps = e["flaps"].as_u64().unwrap_or(0);
        if flaps > 0 {
            status = format!("{status} ×{flaps} flaps");
        }
        rows.push(vec![
            text(&e["at"]),
            lasted(e["at"].as_str().unwrap_or(""), e["until"].as_str()),
            status,
            text(&e["display"]),
            cause(e),
            text(&e["reason"]),
        ]);
    }
    let mut out = if rows.len() == 1 {
        "no changes recorded\n".to_string()
    } else {
        columns(&rows)
    };
    let marks = page["marks"].as_array().cloned().unwrap_or_default();
    if !marks.is_empty() {
        let mut rows = vec![["AT", "WHAT", "TEXT"].map(String::from).to_vec()];
        rows.extend(
            marks
                .iter()
                .map(|m| vec![text(&m["at"]), text(&m["kind"]), text(&m["text"])]),
        );
        let _ = write!(out, "\nmeanwhile:\n{}", columns(&rows));
    }
    if page["continue"].is_string() {
        let _ = writeln!(
            out,
            "\n(older changes: --until {} or a larger --limit)",
            text(
                &page["entries"]
                    .as_array()
                    .and_then(|e| e.last())
                    .map_or(Value::Null, |e| e["at"].clone())
            )
        );
    }
    if let Some(a) = availability {
        let share = a["running_share"]
            .as_f64()
            .map_or("n/a".to_string(), |s| format!("{:.3} %", s * 100.0));
        let minutes = |v: &Value| {
            v.as_i64().map_or("-".into(), |ms| {
                humantime::format_duration(std::time::Duration::from_secs((ms / 1000) as u64))
                    .to_string()
            })
        };
        let _ = writeln!(
            out,
            "\navailability {} – {}: running {share} of the observed time; {} incidents, {} recovered (mean {}, longest {}); before first seen {}, unobserved {}",
            text(&a["from"]),
            text(&a["to"]),
            a["incidents"],
            a["recovered"],
            minutes(&a["mean_recovery_ms"]),
            minutes(&a["longest_recovery_ms"]),
            minutes(&a["before_ms"]),
            minutes(&a["unobserved_ms"]),
        );
        for (status, ms) in a["statuses"].as_object().into_iter().flatten() {
            let _ = writeln!(out, "  {status:<12} {}", minutes(ms));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_a_table_with_its_marks_and_availability() {
        let page = json!({
            "entries": [
                {"at": "2026-12-01T10:05:00.000Z", "until": null, "status": "running",
                 "display": "running", "reason": "every replica is ready", "flaps": 2,
                 "cause": {"kind": "task", "id": "t-1"}},
                {"at": "2026-12-01T10:00:00.000Z", "until": "2026-12-01T10:05:00.000Z",
                 "status": "degraded", "transitional": "restarting", "display": "restarting",
                 "reason": "1 of 2 ready", "flaps": 0},
            ],
            "marks": [{"at": "2026-12-01T10:00:00.000Z", "kind": "task", "text": "restart running"}],
            "continue": "17",
        });
        let availability = json!({"from": "a", "to": "b", "running_share": 0.5, "incidents": 1,
            "recovered": 1, "mean_recovery_ms": 300_000, "longest_recovery_ms": 300_000,
            "before_ms": 0, "unobserved_ms": 0, "statuses": {"running": 300_000, "degraded": 300_000}});
        let out = table(&page, Some(&availability));
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with("SINCE") && lines[0].contains("CAUSE"),
            "{out}"
        );
        assert!(
            lines[1].contains("running ×2 flaps") && lines[1].contains("task t-1"),
            "{out}"
        );
        assert!(
            lines[2].contains("degraded (restarting)") && lines[2].contains("5m"),
            "{out}"
        );
        assert!(
            out.contains("meanwhile:") && out.contains("restart running"),
            "{out}"
        );
        assert!(out.contains("older changes"), "{out}");
        assert!(
            out.contains("running 50.000 %") && out.contains("1 incidents"),
            "{out}"
        );
    }

    #[test]
    fn an_app_is_namespace_and_name() {
        for bad in ["web", "/web", "shop/", "a/b/c"] {
            let args = HistoryArgs {
                app: bad.into(),
                instance: None,
                url: "http://127.0.0.1:9".into(),
                token: None,
                since: None,
                until: None,
                limit: 5,
                availability: None,
                output: Output::Table,
            };
            let error = history(&args).unwrap_err();
            assert!(error.is_usage(), "{bad}: {error}");
        }
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }
}
