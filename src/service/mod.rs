//! An HTTP service around an [`Agent`]: sessions, turns, a live Server-Sent Events stream of each
//! session's lifecycle (with the hooks that ran on each event), cancellation, remote approvals,
//! metrics, and a console page. `examples/service.rs` runs it (SPEC SEC-9).
//!
//! ```no_run
//! use hookbus::service::{serve, Service, ServiceConfig};
//! use hookbus::Agent;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ServiceConfig::new(&std::env::var("HOOKBUS_TOKEN")?)?;
//! let service = Service::new(config, Agent::builder()).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, service, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(()) }
//! ```
//!
//! ## Who may call it
//!
//! * **Every request** must name this service in `Host` (`127.0.0.1`, `localhost` or `[::1]`
//!   with the bound port, the bound address, or a name in [`ServiceConfig::allowed_hosts`]):
//!   DNS rebinding gets 403. A request with a foreign `Origin` (including `null`) gets 403. A
//!   POST, PUT or PATCH must declare `content-type: application/json` (415 otherwise), so no
//!   HTML form or beacon reaches a route.
//! * **Every route but `GET /health` and the page's static files** needs
//!   `Authorization: Bearer <token>` (401 otherwise, with `WWW-Authenticate: Bearer`). The token
//!   names an [`Identity`]: the primary token is [`OPERATOR`], further tokens are named
//!   ([`TokenSet::add`], `--token-file`). Tokens are compared in constant time; a token in the
//!   query string or a cookie is not looked at.
//! * **Sessions belong to the identity that opened them**: another identity's session, and its
//!   approvals, are 404 to everyone else, exactly like ones that do not exist.
//! * **The permission policy is the operator's**: the rules ([`ServiceConfig::permissions`],
//!   `--settings`) and a ceiling ([`ServiceConfig::max_mode`], `--max-mode`, default
//!   `default`). A client may ask for a stricter mode (`plan` < `dontAsk` < `default` <
//!   `acceptEdits` < `bypassPermissions`), never a looser one: 403.
//! * **No file is read because a request names it**: a script is JSON in the body.
//!
//! ## Routes
//!
//! | method and path | auth | what |
//! |---|---|---|
//! | `GET /health` | none | `{"status": "ok"}` |
//! | `GET /`, `/page.js`, `/page.css` | none | the console (static; open `/#token=<token>`) |
//! | `POST /sessions` | token | opens a session: `{"script": <script>, "permission_mode"?, "id"?, "detached"?: false, "keep_workspace"?: false}`; the script is a [`Script`](crate::Script) object (or a string holding one), or the body's own `turns`. 201, 403 (mode), 409 (id in use), 429 (limit) |
//! | `GET /sessions` | token | the caller's sessions |
//! | `GET /sessions/{id}` | token | one session, with its kept history's size and drops |
//! | `POST /sessions/{id}/turns` | token | runs a turn: `{"prompt": "..."}`; answers the result within the response caps; 409 while another turn runs |
//! | `GET /sessions/{id}/events` | token | Server-Sent Events, see [`sse`](self#events) below |
//! | `POST /sessions/{id}/cancel` | token | cancels the running turn |
//! | `DELETE /sessions/{id}` | token | cancels, closes (`SessionEnd`) and removes the workspace |
//! | `GET /approvals` | token | the caller's pending permission asks, each with its `session_id` |
//! | `POST /approvals/{id}` | token | answers one: `{"decision": "allow" \| "allow_always" \| "deny", "reason"?}` |
//! | `GET /metrics` | operator | the metrics report (it covers every identity) |
//!
//! A rejected request gets a 4xx with `{"error": "..."}` ([`ApiError`]) and changes nothing: a
//! session that cannot be opened leaves no workspace and no count behind.
//!
//! ## Events
//!
//! `GET /sessions/{id}/events` sends each envelope as an SSE frame named after its event, a
//! `hooks` frame per event once its hooks answered (name, decision, status, latency), a
//! `lagged` frame when this subscriber fell behind and skipped records, and a `closed` frame
//! last (`ended` after `SessionEnd`, or `shutdown`).
//!
//! ## Bounds ([`ServiceLimits`], each an option of [`ServeArgs`])
//!
//! | bound | default |
//! |---|---|
//! | open sessions (429 beyond) | 64 |
//! | idle expiry (no request, no turn) | 30 min |
//! | request body (413 beyond) | 1 MiB |
//! | turn response; longest string in it | 4 MiB; 64 KiB |
//! | one tool result; a turn's tool results | 64 KiB; 1 MiB |
//! | kept history per session | 10,000 envelopes and 2 MiB |
//! | an event subscriber's lag before it skips | 256 records |
//! | one turn per session at a time | (409) |
//! | approval wait | 5 min |
//! | graceful shutdown | 10 s |
//!
//! ## Lifecycle
//!
//! A turn belongs to its HTTP request: when the client goes away before the turn ends, the turn
//! is cancelled, and an approval it waits for is withdrawn (denied with source `cancelled`) —
//! unless the session was opened with `"detached": true`. Workspaces live in a private root
//! (`0700`, a fresh temporary directory unless configured, which must then be the service
//! user's); a session's workspace is removed when it ends (closed, expired, shutdown) unless it
//! asked for `keep_workspace`. [`serve`] shuts down gracefully: event streams end at once,
//! running turns are cancelled, and what still runs at the deadline is dropped.
//!
//! Pages get `Content-Security-Policy` (scripts and styles from the service only, no framing),
//! `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
//! and every response `Cache-Control: no-store`.

mod auth;
#[cfg(feature = "cli")]
mod cli;
mod config;
#[cfg(feature = "nats")]
mod fleet;
mod page;
mod routes;
mod sessions;
mod sse;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::validate_request::ValidateRequestHeaderLayer;

use crate::agent::{Agent, AgentBuilder};
use crate::permission::approver::{ApprovalDesk, ChannelApprover};
use crate::runtime::bus::ShutdownReport;

#[cfg(feature = "cli")]
pub use cli::{ServeArgs, TokenSource};
pub use config::{
    generate_token, looseness, parse_duration, Identity, ProviderChoices, ServiceConfig,
    ServiceError, ServiceLimits, TokenSet, MIN_TOKEN_LEN, OPERATOR,
};
#[cfg(feature = "nats")]
pub use fleet::Fleet;
pub use routes::ApiError;

use auth::{AllowedHosts, BearerAuth, RequestGuard};
use config::WorkspaceRoot;
use sessions::{close_slot, Sessions};

/// The Content-Security-Policy of every response: the page's script and style come from the
/// service itself; nothing inline, no framing, no forms.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The service: the agent it runs sessions on, the approvals desk, the sessions, the
/// operator's configuration. Cheap to clone (the handlers share it).
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

struct Inner {
    agent: Agent,
    desk: ApprovalDesk,
    config: ServiceConfig,
    tokens: Arc<TokenSet>,
    root: WorkspaceRoot,
    sessions: Sessions,
    /// Fires when shutdown starts: event streams end, the idle reaper stops.
    shutdown: CancellationToken,
    /// The fleet's approvals, when the service is an instance of one.
    #[cfg(feature = "nats")]
    fleet: std::sync::OnceLock<crate::nats::FleetApprovals>,
}

impl Drop for Inner {
    /// A service dropped without [`Service::finish`] still removes the workspaces of its open
    /// sessions (unless kept), and a temporary root with them unless something was kept in it.
    fn drop(&mut self) {
        for slot in self.sessions.all() {
            if !slot.keep_workspace {
                let _ = std::fs::remove_dir_all(&slot.workspace);
            }
        }
        if let WorkspaceRoot::Temporary(path) = &self.root {
            let _ = std::fs::remove_dir(path);
        }
    }
}

impl Service {
    /// Builds the agent from `agent` with the service's approver (a
    /// [`ChannelApprover`] answered through `/approvals`), the operator's rules (when
    /// [`ServiceConfig::permissions`] is set) and the service's bounds; prepares the workspace
    /// root; and starts the idle-session reaper. Must be called inside a tokio runtime.
    pub async fn new(config: ServiceConfig, agent: AgentBuilder) -> Result<Self, ServiceError> {
        let root = WorkspaceRoot::prepare(config.workspace_root.as_deref())?;
        let (approver, desk) = ChannelApprover::new();
        let l = config.limits.clone();
        let mut builder = agent
            .approver(approver)
            .approval_timeout(l.approval_timeout)
            .with_limits(|limits| {
                limits.event_history = l.event_history;
                limits.event_history_bytes = l.event_history_bytes;
                limits.event_stream_buffer = l.event_stream_buffer;
                limits.tool_output_bytes = l.tool_output_bytes;
                limits.turn_tool_output_bytes = l.turn_tool_output_bytes;
            });
        if let Some(rules) = config.permissions.clone() {
            builder = builder.permissions(rules);
        }
        let agent = builder.build().await?;
        let inner = Arc::new(Inner {
            agent,
            desk,
            tokens: Arc::new(config.tokens.clone()),
            sessions: Sessions::new(l.max_sessions),
            root,
            shutdown: CancellationToken::new(),
            #[cfg(feature = "nats")]
            fleet: std::sync::OnceLock::new(),
            config,
        });
        #[cfg(feature = "nats")]
        if let Some(fleet) = &inner.config.fleet {
            let approvals = fleet::join(fleet, &inner).await?;
            let _ = inner.fleet.set(approvals);
        }
        tokio::spawn(reap_idle(
            Arc::downgrade(&inner),
            inner.shutdown.clone(),
            l.idle_expiry,
            l.shutdown_deadline,
        ));
        Ok(Self { inner })
    }

    /// The agent the sessions run on.
    pub fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// The operator's configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.inner.config
    }

    /// The directory the session workspaces are made in.
    pub fn workspace_root(&self) -> &Path {
        self.inner.root.path()
    }

    /// The routes, for a listener bound to `bound` (its port and address are the accepted
    /// `Host` names, with the configured ones), behind the request guard, authentication, the
    /// body limit and the security headers.
    pub fn router(&self, bound: SocketAddr) -> Router {
        let limits = &self.inner.config.limits;
        let guard = RequestGuard {
            hosts: Arc::new(AllowedHosts::new(bound, &self.inner.config.allowed_hosts)),
        };
        let auth = BearerAuth {
            tokens: self.inner.tokens.clone(),
        };
        let api = Router::new()
            .route(
                "/sessions",
                post(routes::open_session).get(routes::list_sessions),
            )
            .route(
                "/sessions/{id}",
                get(routes::session_info).delete(routes::close_session),
            )
            .route("/sessions/{id}/turns", post(routes::run_turn))
            .route("/sessions/{id}/events", get(routes::events))
            .route("/sessions/{id}/cancel", post(routes::cancel))
            .route("/approvals", get(routes::approvals))
            .route("/approvals/{id}", post(routes::answer))
            .route("/metrics", get(routes::metrics))
            .fallback(routes::not_found)
            .layer(ValidateRequestHeaderLayer::custom(auth));
        let header = |v: &'static str| HeaderValue::from_static(v);
        Router::new()
            .route("/health", get(routes::health))
            .merge(page::routes())
            .merge(api)
            .layer(DefaultBodyLimit::max(limits.max_body_bytes))
            .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
            .layer(ValidateRequestHeaderLayer::custom(guard))
            .layer(SetResponseHeaderLayer::overriding(
                CONTENT_SECURITY_POLICY,
                header(CONTENT_SECURITY_POLICY_VALUE),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                X_FRAME_OPTIONS,
                header("DENY"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                X_CONTENT_TYPE_OPTIONS,
                header("nosniff"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                REFERRER_POLICY,
                header("no-referrer"),
            ))
            .layer(SetResponseHeaderLayer::overriding(
                CACHE_CONTROL,
                header("no-store"),
            ))
            .with_state(self.clone())
    }

    /// Starts shutting down: every event stream ends (with a `closed` frame), every running
    /// turn is cancelled (withdrawing its approvals), the idle reaper stops.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.cancel();
        for slot in self.inner.sessions.all() {
            slot.handle.cancel();
        }
    }

    /// Whether shutdown has started.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Ends the service: closes every session (`SessionEnd` reason `shutdown`, workspaces
    /// removed unless kept) and shuts the agent down, each within the shutdown deadline.
    pub async fn finish(&self) -> ShutdownReport {
        self.begin_shutdown();
        let deadline = self.inner.config.limits.shutdown_deadline;
        let slots: Vec<_> = self
            .inner
            .sessions
            .all()
            .into_iter()
            .filter_map(|s| self.inner.sessions.remove(s.handle.id()))
            .collect();
        let closing = slots
            .into_iter()
            .map(|slot| close_slot(slot, "shutdown", deadline));
        let _ = tokio::time::timeout(deadline, futures_util::future::join_all(closing)).await;
        self.inner.agent.shutdown(deadline).await
    }
}

/// Closes the sessions that have been idle for `expiry` (SessionEnd reason `expired`), until
/// the service shuts down or is dropped.
async fn reap_idle(
    inner: std::sync::Weak<Inner>,
    shutdown: CancellationToken,
    expiry: Duration,
    deadline: Duration,
) {
    let tick = (expiry / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        for id in inner.sessions.idle(expiry) {
            if let Some(slot) = inner.sessions.remove(&id) {
                tracing::info!(session = %id, "closing an idle session");
                tokio::spawn(close_slot(slot, "expired", deadline));
            }
        }
    }
}

/// Serves `service` on `listener` until `signal` completes, then shuts down gracefully: event
/// streams end and running turns are cancelled at once, open connections get
/// [`ServiceLimits::shutdown_deadline`] to finish, and the sessions and the agent are closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Service,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<ShutdownReport> {
    let bound = listener.local_addr()?;
    let app = service.router(bound);
    let token = service.inner.shutdown.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(token.clone().cancelled_owned());
    let deadline = service.inner.config.limits.shutdown_deadline;
    let trigger = {
        let service = service.clone();
        async move {
            tokio::select! {
                () = signal => service.begin_shutdown(),
                () = token.cancelled() => {}
            }
            tokio::time::sleep(deadline).await;
        }
    };
    tokio::select! {
        served = server => served?,
        () = trigger => {
            tracing::warn!("connections still open at the shutdown deadline were dropped");
        }
    }
    Ok(service.finish().await)
}
