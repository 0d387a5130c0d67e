//! The route handlers. Every handler behind authentication gets the caller's [`Identity`] and
//! sees only that identity's sessions and approvals; each request is checked whole before
//! anything is created, answered or cancelled.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use super::config::Identity;
use super::sessions::{close_slot, create_workspace, remove_workspace, Reservation, Slot};
use super::sse::Feed;
use super::{Service, ServiceConfig, ServiceLimits};
use crate::agent::scripted::{Script, ScriptedProvider};
use crate::agent::{AgentSession, Provider, SessionOptions, TurnResult};
use crate::permission::approver::Approval;
use crate::permission::service::PermissionMode;

/// A rejected request: its status and a JSON body `{"error": "..."}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: malformed (bad id, unknown mode, a script that is not JSON).
    #[error("{0}")]
    BadRequest(String),
    /// 401: no valid token.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: refused by policy (foreign Host or Origin, a mode above the ceiling, an
    /// operator-only route).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such session or approval, or one of another identity.
    #[error("no {what} `{id}`")]
    NotFound {
        /// `session` or `approval`.
        what: &'static str,
        /// The id asked for.
        id: String,
    },
    /// 409: the id is in use, or a turn is already running.
    #[error("{0}")]
    Conflict(String),
    /// 415: not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: JSON of the wrong shape, an invalid decision, a script that does not parse.
    #[error("{0}")]
    Unprocessable(String),
    /// 429: the session limit is reached.
    #[error("{0}")]
    TooMany(String),
    /// 500: the service failed (a workspace could not be made).
    #[error("{0}")]
    Internal(String),
    /// 503: another instance of the fleet, which owns what was asked for, did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// What axum's JSON extractor refused, with its status (400, 413, 415, 422).
    #[error("{message}")]
    Body {
        /// The status axum chose.
        status: StatusCode,
        /// Its message.
        message: String,
    },
}

impl ApiError {
    /// An error of this status (used by the middleware).
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let m = message.into();
        match status {
            StatusCode::UNAUTHORIZED => Self::Unauthorized(m),
            StatusCode::FORBIDDEN => Self::Forbidden(m),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Self::UnsupportedMediaType(m),
            status => Self::Body { status, message: m },
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Body { status, .. } => *status,
        }
    }

    fn not_found(what: &'static str, id: &str) -> Self {
        // The id is echoed cut short: an error never grows with the request.
        let mut id = id.to_owned();
        crate::agent::cut_text(&mut id, 128);
        Self::NotFound { what, id }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), Json(json!({ "error": self.to_string() }))).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    /// 400 for a body that is not JSON, 422 for JSON of the wrong shape, 415 without the JSON
    /// content type, 413 past the body limit.
    fn from(e: JsonRejection) -> Self {
        let mut message = e.body_text();
        crate::agent::cut_text(&mut message, 1024);
        Self::Body {
            status: e.status(),
            message,
        }
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> Self {
        match e {
            crate::Error::SessionExists(_) => Self::Conflict(e.to_string()),
            crate::Error::NoSuchSession(id) | crate::Error::SessionClosed(id) => {
                Self::not_found("session", &id)
            }
            crate::Error::NoSuchApproval(id) => Self::not_found("approval", &id.to_string()),
            e => Self::BadRequest(e.to_string()),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// `GET /health`: open, says nothing but that the service answers.
pub(crate) async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

#[derive(Deserialize)]
pub(crate) struct OpenSession {
    /// The script: a JSON object, or a string holding one. Without it, the body's own `turns`
    /// (and `agents`, `files`) are the script.
    #[serde(default)]
    script: Option<Value>,
    #[serde(default, alias = "mode")]
    permission_mode: Option<String>,
    #[serde(default)]
    id: Option<String>,
    /// Turns run on when their HTTP client goes away.
    #[serde(default)]
    detached: bool,
    /// The workspace stays when the session ends.
    #[serde(default)]
    keep_workspace: bool,
    /// A model the operator offers, by name; without it the session plays its script.
    #[serde(default)]
    provider: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// The script of a request. It is JSON in the body, never a path: nothing the client names is
/// read from the server's disk.
fn script_of(body: &mut OpenSession) -> ApiResult<Script> {
    let bad = |e: crate::Error| ApiError::Unprocessable(e.to_string());
    match body.script.take() {
        Some(Value::String(text)) if text.trim_start().starts_with('{') => {
            Script::parse(&text, "script").map_err(bad)
        }
        Some(Value::String(_)) => Err(ApiError::BadRequest(
            "`script` is the script itself as JSON (an object, or a string holding one); \
             file paths are not read"
                .into(),
        )),
        Some(value @ Value::Object(_)) => Script::parse(&value.to_string(), "script").map_err(bad),
        Some(_) => Err(ApiError::BadRequest(
            "`script` is a JSON object (or a string holding one)".into(),
        )),
        None => Script::parse(
            &Value::Object(std::mem::take(&mut body.rest)).to_string(),
            "body",
        )
        .map_err(bad),
    }
}

/// Session ids become directory names: keep them plain.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id != "."
        && id != ".."
}

/// `POST /sessions`.
pub(crate) async fn open_session(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    body: Result<Json<OpenSession>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let Json(mut body) = body?;
    let script = script_of(&mut body)?;
    let mode = session_mode(body.permission_mode.as_deref(), &svc.inner.config)?;
    let provider = session_provider(body.provider.as_deref(), &svc.inner.config, &script)?;
    let id = session_id(body.id)?;
    let place = reserve_place(&svc, &id)?;
    let workspace = new_workspace(svc.inner.root.path(), &id)?;
    // From here on, a failure removes the workspace: a rejected request leaves nothing.
    let handle = match start_session(&svc, script, provider, &workspace, &id, mode).await {
        Ok(handle) => handle,
        Err(e) => {
            remove_workspace(workspace).await;
            return Err(e);
        }
    };
    let slot = Slot::new(
        handle,
        who,
        mode,
        body.detached,
        body.keep_workspace,
        workspace,
    );
    let workspace = slot.handle.workspace().display().to_string();
    svc.inner.sessions.insert(place, id.clone(), Arc::new(slot));
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": id,
            "workspace": workspace,
            "permission_mode": mode,
            "detached": body.detached,
        })),
    ))
}

/// The session's model: one the operator offers under the name asked for, else the script.
fn session_provider(
    asked: Option<&str>,
    config: &ServiceConfig,
    script: &Script,
) -> ApiResult<Arc<dyn Provider>> {
    match asked {
        None => Ok(Arc::new(ScriptedProvider::from_script(script.clone()))),
        Some(name) => config.providers.get(name).cloned().ok_or_else(|| {
            let offered = config.providers.names();
            ApiError::BadRequest(if offered.is_empty() {
                format!("unknown provider `{name}`: this service offers none")
            } else {
                format!(
                    "unknown provider `{name}`: this service offers {}",
                    offered.join(", ")
                )
            })
        }),
    }
}

/// The session's permission mode: the one `asked` (if any), refused above the service's ceiling.
fn session_mode(asked: Option<&str>, config: &ServiceConfig) -> ApiResult<PermissionMode> {
    let asked = match asked {
        None => None,
        Some(m) => Some(
            m.parse::<PermissionMode>()
                .map_err(|e| ApiError::BadRequest(e.to_string()))?,
        ),
    };
    config.session_mode(asked).ok_or_else(|| {
        ApiError::Forbidden(format!(
            "permission mode `{}` is looser than this service allows (at most `{}`)",
            asked.map_or("", PermissionMode::as_str),
            config.max_mode
        ))
    })
}

/// The session's id: the one `asked` if it is valid, else a fresh one.
fn session_id(asked: Option<String>) -> ApiResult<String> {
    match asked {
        Some(id) if !valid_id(&id) => Err(ApiError::BadRequest(
            "invalid session id: use 1 to 128 letters, digits, `-`, `_`, `.`".into(),
        )),
        Some(id) => Ok(id),
        None => Ok(format!("s-{}", super::config::random_suffix())),
    }
}

/// A place for session `id`, refused at the session limit or when `id` is already open.
fn reserve_place<'a>(svc: &'a Service, id: &str) -> ApiResult<Reservation<'a>> {
    let sessions = &svc.inner.sessions;
    let place = sessions.reserve().ok_or_else(|| {
        ApiError::TooMany(format!(
            "the service has {} sessions open, its limit; close one first",
            svc.inner.config.limits.max_sessions
        ))
    })?;
    if sessions.contains(id) || svc.inner.agent.session(id).is_some() {
        return Err(ApiError::Conflict(format!(
            "a session `{id}` is already open"
        )));
    }
    Ok(place)
}

/// Creates session `id`'s workspace under `root`; one kept by an earlier session is a conflict.
fn new_workspace(root: &std::path::Path, id: &str) -> ApiResult<PathBuf> {
    create_workspace(root, id).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            ApiError::Conflict(format!(
                "a workspace `{id}` exists (kept by an earlier session)"
            ))
        } else {
            ApiError::Internal(format!("cannot create the workspace: {e}"))
        }
    })
}

/// Writes the script's files into `workspace` and opens the session there.
async fn start_session(
    svc: &Service,
    script: Script,
    provider: Arc<dyn Provider>,
    workspace: &std::path::Path,
    id: &str,
    mode: PermissionMode,
) -> ApiResult<AgentSession> {
    script.write_files(workspace).map_err(|e| match e {
        crate::Error::OutsideWorkspace { .. } => ApiError::BadRequest(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    })?;
    let mut options = SessionOptions::new(workspace).id(id).permission_mode(mode);
    options.provider = Some(provider);
    Ok(svc.inner.agent.open_session(options).await?)
}

/// `GET /sessions`: the caller's sessions.
pub(crate) async fn list_sessions(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
) -> Json<Value> {
    let list: Vec<_> = svc
        .inner
        .sessions
        .of(&who)
        .iter()
        .map(|s| s.info())
        .collect();
    Json(json!({ "sessions": list }))
}

impl Service {
    fn owned(&self, id: &str, who: &Identity) -> ApiResult<Arc<Slot>> {
        self.inner
            .sessions
            .owned(id, who)
            .ok_or_else(|| ApiError::not_found("session", id))
    }
}

/// `GET /sessions/{id}`: one session, with its kept history's figures.
pub(crate) async fn session_info(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let slot = svc.owned(&id, &who)?;
    let mut info = serde_json::to_value(slot.info()).unwrap_or_default();
    info["history"] = serde_json::to_value(slot.handle.history_stats()).unwrap_or_default();
    info["workspace"] = json!(slot.handle.workspace());
    Ok(Json(info))
}

#[derive(Deserialize)]
pub(crate) struct Turn {
    #[serde(alias = "message", alias = "input", alias = "text")]
    prompt: String,
}

/// Ends the turn's claim on its session; when the turn's request is dropped before the turn
/// finished (its client went away), cancels the turn — which withdraws a pending approval,
/// denied with source `cancelled` — unless the session is detached.
struct TurnGuard {
    slot: Arc<Slot>,
    running: bool,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if self.running && !self.slot.detached {
            tracing::info!(
                session = self.slot.handle.id(),
                "the turn's client went away: the turn is cancelled"
            );
            self.slot.handle.cancel();
        }
        self.slot.end_turn();
    }
}

/// `POST /sessions/{id}/turns`: runs a turn (one at a time per session) and answers its result,
/// within the response caps.
pub(crate) async fn run_turn(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    body: Result<Json<Turn>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let slot = svc.owned(&id, &who)?;
    let Json(body) = body?;
    if !slot.start_turn() {
        return Err(ApiError::Conflict(format!(
            "session `{id}` is running a turn; one at a time"
        )));
    }
    let mut guard = TurnGuard {
        slot: slot.clone(),
        running: true,
    };
    let result = slot.handle.run_turn(body.prompt).await;
    guard.running = false;
    drop(guard);
    Ok(Json(capped(result?, &svc.inner.config.limits)))
}

/// A turn's result within the response caps: every string cut to `max_field_bytes`; past
/// `max_response_bytes`, the messages are left out, then the calls' contents, then the calls,
/// each time saying so in `truncated`.
pub(crate) fn capped(result: TurnResult, limits: &ServiceLimits) -> Value {
    let mut v = serde_json::to_value(&result).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    cut_strings(&mut v, limits.max_field_bytes);
    let size = |v: &Value| serde_json::to_vec(v).map_or(usize::MAX, |b| b.len());
    let mut left_out = Vec::new();
    if size(&v) > limits.max_response_bytes {
        v["messages"] = json!([]);
        left_out.push(format!("messages ({} of them)", result.messages.len()));
    }
    if size(&v) > limits.max_response_bytes {
        if let Some(calls) = v["calls"].as_array_mut() {
            for call in calls {
                call["content"] = json!("[left out: the response cap]");
                call["final_input"] = Value::Null;
                call["reminders"] = json!([]);
            }
        }
        left_out.push("the calls' contents".into());
    }
    if size(&v) > limits.max_response_bytes {
        v["calls"] = json!([]);
        left_out.push(format!("calls ({} of them)", result.calls.len()));
    }
    if !left_out.is_empty() {
        v["truncated"] = json!(format!(
            "the response passed {} bytes; left out: {}",
            limits.max_response_bytes,
            left_out.join(", ")
        ));
    }
    v
}

fn cut_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) => crate::agent::cut_text(s, max),
        Value::Array(items) => items.iter_mut().for_each(|i| cut_strings(i, max)),
        Value::Object(map) => map.values_mut().for_each(|i| cut_strings(i, max)),
        _ => {}
    }
}

/// `GET /sessions/{id}/events`: Server-Sent Events (see [`super::sse`]).
pub(crate) async fn events(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let slot = svc.owned(&id, &who)?;
    let feed = Feed::new(
        slot.handle.events(),
        slot.handle.hook_runs(),
        svc.inner.shutdown.clone(),
    );
    Ok(Sse::new(feed).keep_alive(KeepAlive::default()))
}

/// `POST /sessions/{id}/cancel`.
pub(crate) async fn cancel(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let slot = svc.owned(&id, &who)?;
    slot.handle.cancel();
    Ok((StatusCode::ACCEPTED, Json(json!({ "cancelled": id }))))
}

/// `DELETE /sessions/{id}`: cancels a running turn, ends the session and removes its workspace
/// (unless kept).
pub(crate) async fn close_session(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    svc.owned(&id, &who)?;
    let slot = svc
        .inner
        .sessions
        .remove(&id)
        .ok_or_else(|| ApiError::not_found("session", &id))?;
    let kept = slot
        .keep_workspace
        .then(|| slot.workspace.display().to_string());
    close_slot(slot, "other", svc.inner.config.limits.shutdown_deadline).await;
    Ok(Json(json!({ "closed": id, "kept_workspace": kept })))
}

/// `GET /approvals`: the caller's sessions' pending asks, each naming its session.
pub(crate) async fn approvals(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
) -> Json<Value> {
    #[cfg(feature = "nats")]
    if let Some(fleet) = svc.inner.fleet.get() {
        let mine: Vec<Value> = fleet
            .pending_for(&svc.inner.tokens.fleet_key(&who))
            .into_iter()
            .map(|a| {
                let mut entry = json!(a.request);
                entry["id"] = json!(a.id);
                entry["instance"] = json!(a.instance);
                entry
            })
            .collect();
        return Json(json!({ "approvals": mine }));
    }
    let mine: Vec<_> = svc
        .inner
        .desk
        .pending()
        .into_iter()
        .filter(|a| svc.inner.sessions.owns(&a.session_id, &who))
        .collect();
    Json(json!({ "approvals": mine }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /approvals/{id}`: answers one of the caller's pending asks.
pub(crate) async fn answer(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    body: Result<Json<Answer>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let Json(body) = body?;
    // An id as the list gave it, JSON quotes and all (`/approvals/"a:3"`), is the same id.
    let id = id
        .strip_prefix('"')
        .and_then(|i| i.strip_suffix('"'))
        .map_or(id.clone(), str::to_owned);
    let approval = match body.decision.as_str() {
        "allow" => Approval::AllowOnce,
        "allow_always" => Approval::AllowAlways,
        "deny" => Approval::Deny {
            reason: body.reason.map(|mut r| {
                crate::agent::cut_text(&mut r, 1024);
                r
            }),
        },
        _ => {
            return Err(ApiError::Unprocessable(
                "invalid decision: use allow, allow_always or deny".into(),
            ))
        }
    };
    #[cfg(feature = "nats")]
    if let Some(fleet) = svc.inner.fleet.get() {
        if id.contains(':') {
            use crate::nats::AnswerError;
            let key = svc.inner.tokens.fleet_key(&who);
            return match fleet.answer(&id, &key, approval).await {
                Ok(()) => Ok(Json(json!({ "answered": id, "decision": body.decision }))),
                Err(AnswerError::NotFound) => Err(ApiError::not_found("approval", &id)),
                Err(e @ AnswerError::Unreachable { .. }) => {
                    Err(ApiError::Unavailable(e.to_string()))
                }
            };
        }
    }
    let number: u64 = id
        .parse()
        .map_err(|_| ApiError::not_found("approval", &id))?;
    let theirs = svc
        .inner
        .desk
        .pending()
        .into_iter()
        .find(|a| a.id == number)
        .is_some_and(|a| svc.inner.sessions.owns(&a.session_id, &who));
    if !theirs {
        return Err(ApiError::not_found("approval", &id));
    }
    svc.inner.desk.answer(number, approval)?;
    Ok(Json(
        json!({ "answered": number, "decision": body.decision }),
    ))
}

/// `GET /metrics`: the runtime's metrics report, for the operator's token only (it spans every
/// identity's sessions).
pub(crate) async fn metrics(
    State(svc): State<Service>,
    Extension(who): Extension<Identity>,
) -> ApiResult<Json<crate::runtime::metrics::MetricsReport>> {
    if !who.is_operator() {
        return Err(ApiError::Forbidden(
            "the metrics cover every identity's sessions: the operator's token only".into(),
        ));
    }
    Ok(Json(svc.inner.agent.bus().metrics_report()))
}

/// Any other path behind authentication.
pub(crate) async fn not_found() -> ApiError {
    ApiError::Body {
        status: StatusCode::NOT_FOUND,
        message: "no such route".into(),
    }
}
