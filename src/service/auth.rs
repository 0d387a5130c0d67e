//! Who may talk to the service, as `tower_http::validate_request` validators: the request guard
//! (`Host`, `Origin`, JSON-only state changes) in front of every route, and bearer-token
//! authentication in front of every route but the health check and the static page, which
//! attaches the caller's [`Identity`] to the request.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use axum::http::uri::Authority;
use axum::http::{HeaderValue, Method, Request, Response, StatusCode};
use axum::response::IntoResponse;
use tower_http::validate_request::ValidateRequest;

use super::config::TokenSet;
use super::routes::ApiError;

/// The `host:port` authorities the service answers to.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// Lower-case host (IPv6 in brackets) and port.
    allowed: Vec<(String, u16)>,
}

impl AllowedHosts {
    /// The loopback names with the bound port, the bound address itself when it is a specific
    /// one, and the configured names (`name` takes the bound port).
    pub fn new(bound: SocketAddr, configured: &[String]) -> Self {
        let port = bound.port();
        let mut allowed: Vec<(String, u16)> = ["127.0.0.1", "localhost", "[::1]"]
            .iter()
            .map(|h| ((*h).to_owned(), port))
            .collect();
        if !bound.ip().is_unspecified() {
            allowed.push((host_of(bound.ip()), port));
        }
        for name in configured {
            match name.parse::<Authority>() {
                Ok(a) if !name.contains('@') => {
                    allowed.push((a.host().to_ascii_lowercase(), a.port_u16().unwrap_or(port)))
                }
                _ => tracing::warn!(name, "ignoring an allowed host that does not parse"),
            }
        }
        Self { allowed }
    }

    /// Whether `authority` (a `Host` header value, or an origin's authority) names this
    /// service. No user info, no trailing dot tricks: the host must equal an allowed name and
    /// the port the allowed port (absent means 80 for `Host`, the scheme's default for an
    /// origin).
    fn allows(&self, authority: &str, default_port: u16) -> bool {
        if authority.contains('@') || authority.is_empty() {
            return false;
        }
        let Ok(a) = authority.parse::<Authority>() else {
            return false;
        };
        let host = a.host().to_ascii_lowercase();
        let port = a.port_u16().unwrap_or(default_port);
        self.allowed.iter().any(|(h, p)| *h == host && *p == port)
    }

    /// Whether an `Origin` header value is one of ours: `http://` or `https://` and an allowed
    /// authority, nothing after it. `null` and anything else is foreign.
    fn allows_origin(&self, origin: &str) -> bool {
        let (rest, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
            (rest, 80)
        } else if let Some(rest) = origin.strip_prefix("https://") {
            (rest, 443)
        } else {
            return false;
        };
        !rest.contains('/') && self.allows(rest, default_port)
    }
}

fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Refuses, before any route runs: a request whose `Host` is not one of ours (DNS rebinding)
/// or is missing; a request whose `Origin` is present and foreign (a page of another site);
/// and a state-changing request (POST, PUT, PATCH, DELETE) whose body is not declared JSON, so
/// no HTML form or `text/plain` beacon can reach a route (CSRF).
#[derive(Debug, Clone)]
pub(crate) struct RequestGuard {
    pub hosts: Arc<AllowedHosts>,
}

impl<B> ValidateRequest<B> for RequestGuard {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        self.check(request).map_err(IntoResponse::into_response)
    }
}

impl RequestGuard {
    fn check<B>(&self, request: &Request<B>) -> Result<(), ApiError> {
        let forbidden = |m: &str| Err(ApiError::Forbidden(m.to_owned()));
        let hosts: Vec<&HeaderValue> = request.headers().get_all(HOST).iter().collect();
        let host_ok = match hosts.as_slice() {
            [one] => one.to_str().is_ok_and(|h| self.hosts.allows(h, 80)),
            _ => false,
        };
        // An absolute-form request target carries its own authority; it must be ours too.
        let uri_ok = request
            .uri()
            .authority()
            .is_none_or(|a| self.hosts.allows(a.as_str(), 80));
        if !host_ok || !uri_ok {
            return forbidden("this service does not answer to that Host");
        }
        let origins: Vec<&HeaderValue> = request.headers().get_all(ORIGIN).iter().collect();
        let origin_ok = match origins.as_slice() {
            [] => true,
            [one] => one.to_str().is_ok_and(|o| self.hosts.allows_origin(o)),
            _ => false,
        };
        if !origin_ok {
            return forbidden("cross-origin requests are refused");
        }
        let changes = matches!(
            *request.method(),
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        if changes {
            let declared = request.headers().get(CONTENT_TYPE);
            let json = declared.is_some_and(is_json);
            // DELETE needs no body; if it declares one, JSON only.
            let needed = *request.method() != Method::DELETE || declared.is_some();
            if needed && !json {
                return Err(ApiError::UnsupportedMediaType(
                    "state-changing requests take a JSON body (content-type: application/json)"
                        .into(),
                ));
            }
        }
        Ok(())
    }
}

fn is_json(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// Bearer-token authentication: exactly one `Authorization: Bearer <token>` header (the scheme
/// compared without case, RFC 7235), whose token is one of the configured ones. The caller's
/// [`Identity`] goes into the request's extensions. Tokens anywhere else (query, cookie) are
/// not looked at.
#[derive(Debug, Clone)]
pub(crate) struct BearerAuth {
    pub tokens: Arc<TokenSet>,
}

impl<B> ValidateRequest<B> for BearerAuth {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
        let values: Vec<&HeaderValue> = request.headers().get_all(AUTHORIZATION).iter().collect();
        let identity = match values.as_slice() {
            [one] => one
                .to_str()
                .ok()
                .and_then(bearer_token)
                .and_then(|t| self.tokens.identify(t)),
            _ => None,
        };
        match identity {
            Some(id) => {
                request.extensions_mut().insert(id);
                Ok(())
            }
            None => {
                let mut response = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "a valid `Authorization: Bearer <token>` header is required",
                )
                .into_response();
                response
                    .headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                Err(response)
            }
        }
    }
}

/// The token of a `Bearer <token>` credential: the scheme in any case, one space, a token
/// without spaces.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> AllowedHosts {
        AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &["box.example".into()])
    }

    #[test]
    fn hosts_and_origins() {
        let h = hosts();
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
            "box.example:8080",
        ] {
            assert!(h.allows(ok, 80), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "127.0.0.1:8081",
            "localhost.evil.com:8080",
            "127.0.0.1.nip.io:8080",
            "evil.com",
            "user@127.0.0.1:8080",
            "localhost.:8080",
            "",
            "box.example",
        ] {
            assert!(!h.allows(bad, 80), "{bad}");
        }
        assert!(h.allows_origin("http://127.0.0.1:8080"));
        assert!(h.allows_origin("http://localhost:8080"));
        for bad in [
            "null",
            "http://127.0.0.1:8081",
            "http://evil.com",
            "file://",
            "http://127.0.0.1:8080/x",
            "127.0.0.1:8080",
        ] {
            assert!(!h.allows_origin(bad), "{bad}");
        }
    }

    #[test]
    fn bearer_credentials() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer  abc"), None);
        assert_eq!(bearer_token("Bearer abc def"), None);
    }
}
