//! Access control: bearer tokens that may read, and tokens that may also
//! write. With any token configured, a mutation (any method but GET, HEAD
//! and OPTIONS) needs a write token; with read tokens configured, a read
//! needs a read or write token. Tokens are compared as SHA-256 digests in
//! constant time, each against every configured one. `/healthz`, `/readyz`
//! and the admission webhook (which the API server calls over TLS) are
//! open.
//!
//! Whatever the tokens, a browser may not write from another origin: a
//! mutation that a browser marks as cross-site (`Sec-Fetch-Site`) or whose
//! `Origin` is not this server is refused, and a mutation's body must be
//! JSON — so that a page elsewhere cannot post a task with a plain form or
//! a `text/plain` body to a host that has no tokens configured.
//!
//! And the server answers only the names it is reached by: the `Host` of a
//! request (read or write) must be an address (an IP literal, which DNS
//! rebinding cannot forge), `localhost`, or a name given with
//! `--allowed-host` (the chart gives the Service's). A page on a name of an
//! attacker's that resolves to this server is refused, as its `Origin`
//! would otherwise match its `Host`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::http::ApiError;

/// A secret that does not show in logs or `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

/// What a request's token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Grant {
    None,
    Read,
    Write,
}

/// The configured tokens, as digests.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    read: Vec<[u8; 32]>,
    write: Vec<[u8; 32]>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Routes that need no token (the dashboard page holds no data; what it
/// shows it reads with the user's token).
const OPEN: [&str; 5] = [
    "/",
    super::CHART_JS,
    "/healthz",
    "/readyz",
    "/v1/admission/review",
];

impl Tokens {
    pub fn new(read: &[Secret], write: &[Secret]) -> Self {
        Self {
            read: read.iter().map(|s| digest(&s.0)).collect(),
            write: write.iter().map(|s| digest(&s.0)).collect(),
        }
    }

    /// Whether any token is configured.
    pub(crate) fn enforced(&self) -> bool {
        !self.read.is_empty() || !self.write.is_empty()
    }

    /// What a token allows; every configured digest is compared, so the
    /// time taken does not tell which (or whether one) matched.
    fn grant(&self, token: &str) -> Grant {
        let presented = digest(token);
        let matches = |set: &[[u8; 32]]| {
            set.iter().fold(subtle::Choice::from(0), |found, d| {
                found | d.ct_eq(&presented)
            })
        };
        let (write, read) = (matches(&self.write), matches(&self.read));
        if bool::from(write) {
            Grant::Write
        } else if bool::from(read) {
            Grant::Read
        } else {
            Grant::None
        }
    }
}

/// The names, beyond addresses and `localhost`, that this server is
/// reached by.
#[derive(Debug, Default)]
pub(crate) struct Hosts {
    names: Vec<String>,
}

impl Hosts {
    pub fn new(names: &[String]) -> Self {
        Self {
            names: names
                .iter()
                .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        }
    }

    /// Whether a `Host` (with or without its port) names this server.
    fn allows(&self, host: &str) -> bool {
        let host = host.trim();
        let name = match host.strip_prefix('[') {
            // `[::1]:8080`
            Some(rest) => rest.split(']').next().unwrap_or_default(),
            None => match host.rsplit_once(':') {
                Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
                _ => host,
            },
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.names.contains(&name)
    }
}

/// Refuse requests for a name this server is not reached by (see the
/// module's documentation); the probes and the webhook are answered
/// whatever name the caller used.
pub(crate) async fn known_host(
    State(hosts): State<Arc<Hosts>>,
    request: Request,
    next: Next,
) -> Response {
    let open = ["/healthz", "/readyz", "/v1/admission/review"].contains(&request.uri().path());
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(host) if !open && !hosts.allows(&host) => ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "unknown-host",
            format!(
                "this server is not reached by the name `{host}`: add it with --allowed-host (the chart's `http.allowedHosts`)"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

/// The middleware.
/// Refuse mutations from another origin, and mutation bodies that are
/// not JSON (see the module's documentation).
pub(crate) async fn same_origin(request: Request, next: Next) -> Response {
    let mutation = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !mutation {
        return next.run(request).await;
    }
    let headers = request.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let cross_site = text("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none");
    let foreign_origin = text("origin").is_some_and(|origin| {
        let host = text("host").unwrap_or_default();
        origin
            .split_once("://")
            .map(|(_, authority)| authority.trim_end_matches('/'))
            != Some(host)
    });
    if cross_site || foreign_origin {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "cross-origin",
            "a change may not be asked for from another origin",
        )
        .into_response();
    }
    let has_body = match text("content-length") {
        Some(length) => length.trim() != "0",
        None => headers.contains_key(header::TRANSFER_ENCODING),
    };
    let json = text("content-type").is_some_and(|t| {
        let media = t.split(';').next().unwrap_or_default().trim();
        media.eq_ignore_ascii_case("application/json") || media.ends_with("+json")
    });
    if has_body && !json {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "a request body must be JSON (content-type: application/json)",
        )
        .into_response();
    }
    next.run(request).await
}

pub(crate) async fn guard(
    State(tokens): State<Arc<Tokens>>,
    request: Request,
    next: Next,
) -> Response {
    if !tokens.enforced() || OPEN.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let mutation = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let needed = if mutation {
        Grant::Write
    } else if !tokens.read.is_empty() {
        Grant::Read
    } else {
        Grant::None
    };
    if needed == Grant::None {
        return next.run(request).await;
    }
    // A browser's EventSource cannot set headers: a read may carry its
    // token as `?access_token=`.
    let from_query = (!mutation)
        .then(|| request.uri().query())
        .flatten()
        .and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "access_token")
                .map(|(_, v)| v.into_owned())
        });
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string())
        .or(from_query);
    let presented = presented.as_deref();
    let refuse = |status, code, message: &str| {
        let mut response = ApiError::new(status, code, message).into_response();
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"verdict\""),
        );
        response
    };
    let Some(token) = presented else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "this route needs a bearer token (Authorization: Bearer …)",
        );
    };
    match tokens.grant(token) {
        Grant::None => refuse(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "the bearer token is not one of the configured tokens",
        ),
        grant if grant < needed => refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token may read but not write",
        ),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_addresses_localhost_or_names_given() {
        let hosts = Hosts::new(&[
            "verdict.verdict-system.svc".into(),
            "Verdict.example.".into(),
        ]);
        for allowed in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "10.1.2.3:8443",
            "localhost:8080",
            "LOCALHOST",
            "verdict.verdict-system.svc:443",
            "verdict.example",
            "verdict.example.:80",
        ] {
            assert!(hosts.allows(allowed), "{allowed}");
        }
        for refused in [
            "rebind.attacker.example:8080",
            "127.0.0.1.nip.io:8080",
            "localhost.attacker.example",
            "verdict",
            "",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
    }

    #[test]
    fn tokens_grant_what_they_are_for() {
        let tokens = Tokens::new(
            &[Secret("reader".into())],
            &[Secret("writer".into()), Secret("other-writer".into())],
        );
        assert_eq!(tokens.grant("reader"), Grant::Read);
        assert_eq!(tokens.grant("writer"), Grant::Write);
        assert_eq!(tokens.grant("other-writer"), Grant::Write);
        assert_eq!(tokens.grant("writer "), Grant::None);
        assert_eq!(tokens.grant(""), Grant::None);
        assert!(!Tokens::default().enforced());
        assert_eq!(format!("{:?}", Secret("writer".into())), "\"***\"");
    }
}
