//! An HTTP service around an [`Agent`]: sessions, turns, a live Server-Sent Events stream of each
//! session's lifecycle envelopes, cancellation, remote approvals, metrics, and a dashboard page.
//! `examples/service.rs` runs it.
//!
//! | method and path | what |
//! |---|---|
//! | `POST /sessions` | opens a session: `{"script": <script>, "permission_mode"?: "default", "id"?: "..."}`; the script is a [`Script`] object, a JSON string, or a file path, or the body's own `turns` |
//! | `GET /sessions` | the open sessions' ids |
//! | `POST /sessions/{id}/turns` | runs a turn: `{"prompt": "..."}` (or `message`); answers the turn's result |
//! | `GET /sessions/{id}/events` | Server-Sent Events: the session's envelopes as JSON, in order, to `SessionEnd` |
//! | `POST /sessions/{id}/cancel` | cancels the running turn |
//! | `DELETE /sessions/{id}` | closes the session (`SessionEnd`) |
//! | `GET /approvals` | pending permission asks |
//! | `POST /approvals/{id}` | answers one: `{"decision": "allow" \| "allow_always" \| "deny", "reason"?: "..."}` |
//! | `GET /metrics` | the metrics report |
//! | `GET /` | the dashboard page |
//!
//! A request that is rejected (bad JSON, unknown id, invalid decision) gets a 4xx with
//! `{"error": "..."}` and changes nothing.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use dashmap::DashMap;

use crate::agent::{Agent, AgentSession, SessionOptions};
use crate::approver::{Approval, ApprovalDesk};
use crate::permission::PermissionMode;
use crate::scripted::{Script, ScriptedProvider};

/// What the handlers share.
#[derive(Clone)]
pub struct ServiceState {
    agent: Agent,
    desk: ApprovalDesk,
    workspaces: Arc<PathBuf>,
    /// The open sessions' handles (the agent keeps only weak ones).
    sessions: Arc<DashMap<String, AgentSession>>,
}

impl ServiceState {
    /// A service over `agent`, answering its approvals through `desk` (the other half of the
    /// agent's [`ChannelApprover`](crate::ChannelApprover)); session workspaces are created under
    /// `workspaces`.
    pub fn new(agent: Agent, desk: ApprovalDesk, workspaces: impl Into<PathBuf>) -> Self {
        Self {
            agent,
            desk,
            workspaces: Arc::new(workspaces.into()),
            sessions: Arc::default(),
        }
    }

    fn session(&self, id: &str) -> Result<AgentSession, ApiError> {
        self.sessions
            .get(id)
            .map(|s| s.clone())
            .ok_or_else(|| ApiError::not_found("session", id))
    }

    /// The agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }
}

/// The service's routes.
pub fn router(state: ServiceState) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/sessions", post(open_session).get(list_sessions))
        .route("/sessions/{id}", axum::routing::delete(close_session))
        .route("/sessions/{id}/turns", post(run_turn))
        .route("/sessions/{id}/events", get(events))
        .route("/sessions/{id}/cancel", post(cancel))
        .route("/approvals", get(approvals))
        .route("/approvals/{id}", post(answer))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// A rejected request: a status and a JSON error body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    fn not_found(what: &str, id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("no {what} `{id}`"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    /// 400 for a body that is not JSON, 422 for JSON of the wrong shape, 415 without the JSON
    /// content type.
    fn from(e: JsonRejection) -> Self {
        Self::new(e.status(), e.body_text())
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> Self {
        let status = match e {
            crate::Error::SessionExists(_) => StatusCode::CONFLICT,
            crate::Error::NoSuchSession(_) | crate::Error::SessionClosed(_) => {
                StatusCode::NOT_FOUND
            }
            crate::Error::NoSuchApproval(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        Self::new(status, e.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

#[derive(Deserialize)]
struct OpenSession {
    /// The script: an object, a JSON string, or the path of a script file. Without it, the
    /// body's own `turns` (and `agents`, `files`) are the script.
    #[serde(default)]
    script: Option<Value>,
    #[serde(default, alias = "mode")]
    permission_mode: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

fn script_of(body: &mut OpenSession) -> Result<Script, ApiError> {
    let bad = |e: crate::Error| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    match body.script.take() {
        Some(Value::String(text)) if text.trim_start().starts_with('{') => {
            Script::parse(&text, "script").map_err(bad)
        }
        Some(Value::String(path)) => Script::load(&path).map_err(bad),
        Some(value) => Script::parse(&value.to_string(), "script").map_err(bad),
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

async fn open_session(
    State(state): State<ServiceState>,
    body: Result<Json<OpenSession>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let Json(mut body) = body?;
    let script = script_of(&mut body)?;
    let mode = match body.permission_mode.as_deref() {
        None => None,
        Some(m) => Some(
            m.parse::<PermissionMode>()
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?,
        ),
    };
    let id = match body.id {
        Some(id) if !valid_id(&id) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("invalid session id `{id}`: use letters, digits, `-`, `_`, `.`"),
            ))
        }
        Some(id) => id,
        None => format!(
            "s{}",
            crate::event::now_ms() % 1_000_000_000 + fastrand_like()
        ),
    };
    if state.sessions.contains_key(&id) || state.agent.session(&id).is_some() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("a session `{id}` is already open"),
        ));
    }
    let workspace = state.workspaces.join(&id);
    std::fs::create_dir_all(&workspace).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot create the workspace: {e}"),
        )
    })?;
    script.write_files(&workspace).map_err(|e| match e {
        crate::Error::OutsideWorkspace { .. } => {
            ApiError::new(StatusCode::BAD_REQUEST, e.to_string())
        }
        e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    })?;
    let mut options = SessionOptions::new(&workspace).id(&id);
    options.permission_mode = mode;
    options.provider = Some(Arc::new(ScriptedProvider::from_script(script)));
    let session = state.agent.open_session(options).await?;
    state.sessions.insert(id.clone(), session.clone());
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": session.id(), "workspace": session.workspace() })),
    ))
}

/// A number that differs between two sessions opened in the same millisecond.
fn fastrand_like() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn list_sessions(State(state): State<ServiceState>) -> Json<Value> {
    let mut ids: Vec<String> = state.sessions.iter().map(|s| s.key().clone()).collect();
    ids.sort();
    Json(json!({ "sessions": ids }))
}

#[derive(Deserialize)]
struct Turn {
    #[serde(alias = "message", alias = "input", alias = "text")]
    prompt: String,
}

async fn run_turn(
    State(state): State<ServiceState>,
    Path(id): Path<String>,
    body: Result<Json<Turn>, JsonRejection>,
) -> ApiResult<Json<crate::agent::TurnResult>> {
    let session = state.session(&id)?;
    let Json(body) = body?;
    Ok(Json(session.run_turn(body.prompt).await?))
}

async fn events(
    State(state): State<ServiceState>,
    Path(id): Path<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let session = state.session(&id)?;
    let stream = session.events().map(|env| {
        let data = serde_json::to_string(&*env)
            .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
        Ok(SseEvent::default().event(env.kind().as_str()).data(data))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

async fn cancel(
    State(state): State<ServiceState>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let session = state.session(&id)?;
    session.cancel();
    Ok((StatusCode::ACCEPTED, Json(json!({ "cancelled": id }))))
}

async fn close_session(
    State(state): State<ServiceState>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let session = state.session(&id)?;
    session.close().await?;
    state.sessions.remove(&id);
    Ok(Json(json!({ "closed": id })))
}

async fn approvals(State(state): State<ServiceState>) -> Json<Value> {
    Json(json!({ "approvals": state.desk.pending() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

async fn answer(
    State(state): State<ServiceState>,
    Path(id): Path<String>,
    body: Result<Json<Answer>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let Json(body) = body?;
    let approval = match body.decision.as_str() {
        "allow" => Approval::AllowOnce,
        "allow_always" => Approval::AllowAlways,
        "deny" => Approval::Deny {
            reason: body.reason,
        },
        other => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("invalid decision `{other}`: use allow, allow_always or deny"),
            ))
        }
    };
    let number: u64 = id
        .parse()
        .map_err(|_| ApiError::not_found("approval", &id))?;
    state.desk.answer(number, approval)?;
    Ok(Json(
        json!({ "answered": number, "decision": body.decision }),
    ))
}

async fn metrics(State(state): State<ServiceState>) -> Json<crate::metrics::MetricsReport> {
    Json(state.agent.bus().metrics_report())
}
