//! The HTTP service as an attacker sees it (SEC-9), over real HTTP: tokens, Host and Origin,
//! cross-site forms, the operator's permission ceiling, one identity against another, and the
//! bounds a client could otherwise grow.

mod common;

use std::time::Duration;

use common::http::*;
use serde_json::{json, Value};

/// Every route behind authentication, with a body where it takes one.
fn protected_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        (
            "POST",
            "/sessions",
            Some(json!({ "script": { "turns": [] } })),
        ),
        ("GET", "/sessions", None),
        ("GET", "/sessions/s1", None),
        ("DELETE", "/sessions/s1", None),
        ("POST", "/sessions/s1/turns", Some(json!({ "prompt": "x" }))),
        ("GET", "/sessions/s1/events", None),
        ("POST", "/sessions/s1/cancel", Some(json!({}))),
        ("GET", "/approvals", None),
        ("POST", "/approvals/1", Some(json!({ "decision": "allow" }))),
        ("GET", "/metrics", None),
        ("GET", "/no/such/route", None),
    ]
}

#[tokio::test]
async fn every_route_but_health_and_the_page_needs_the_token() {
    let svc = start().await;
    svc.open("s1", json!({ "turns": [] }), None).await;
    let bad_credentials: Vec<(&str, Option<String>)> = vec![
        ("no header", None),
        (
            "wrong token",
            Some("Bearer not-the-token-0123456789".into()),
        ),
        (
            "a prefix of it",
            Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        ),
        ("it, longer", Some(format!("Bearer {TOKEN}x"))),
        ("basic scheme", Some(format!("Basic {TOKEN}"))),
        ("bare token", Some(TOKEN.into())),
        ("scheme only", Some("Bearer".into())),
        ("two spaces", Some(format!("Bearer  {TOKEN}"))),
        ("empty", Some(String::new())),
    ];
    for (method, path, body) in protected_routes() {
        for (what, header) in &bad_credentials {
            let mut r = svc
                .client
                .request(method.parse().unwrap(), svc.url(path))
                .header("content-type", "application/json");
            if let Some(h) = header {
                r = r.header("authorization", h);
            }
            if let Some(b) = &body {
                r = r.body(b.to_string());
            }
            let response = r.send().await.unwrap();
            assert_eq!(
                response.status().as_u16(),
                401,
                "{method} {path} with {what}"
            );
            assert_eq!(
                response.headers()["www-authenticate"],
                "Bearer",
                "{method} {path}"
            );
        }
        // The token in the query string is not a credential.
        let response = svc
            .client
            .request(
                method.parse().unwrap(),
                svc.url(&format!("{path}?token={TOKEN}&access_token={TOKEN}")),
            )
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 401, "{method} {path}?token=");
    }
    // Two Authorization headers, one of them right: refused.
    let two = format!(
        "GET /sessions HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer wrong-token-000000000\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n",
        svc.addr
    );
    assert_eq!(svc.raw(&two).await, 401);
    // The scheme is case-insensitive (RFC 7235); the token is not.
    let lower = svc
        .client
        .get(svc.url("/sessions"))
        .header("authorization", format!("bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status().as_u16(), 200);
    let upper = svc
        .client
        .get(svc.url("/sessions"))
        .header("authorization", format!("Bearer {}", TOKEN.to_uppercase()))
        .send()
        .await
        .unwrap();
    assert_eq!(upper.status().as_u16(), 401);
    // Open: the health check and the page's static files, which hold no data.
    for path in ["/health", "/", "/page.js", "/page.css"] {
        let r = svc.client.get(svc.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    // With the token, everything works as before.
    for (method, path, body) in protected_routes() {
        let mut r = svc
            .client
            .request(method.parse().unwrap(), svc.url(path))
            .header("authorization", svc.auth())
            .header("content-type", "application/json");
        if let Some(b) = &body {
            r = r.body(b.to_string());
        }
        let status = r.send().await.unwrap().status().as_u16();
        assert!(
            ![401, 403, 415].contains(&status),
            "{method} {path} with the token: {status}"
        );
    }
}

#[tokio::test]
async fn the_page_gets_security_headers_and_loads_nothing_inline() {
    let svc = start().await;
    let page = svc.client.get(svc.url("/")).send().await.unwrap();
    let h = page.headers().clone();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<script src=\"/page.js\""), "{html}");
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "nothing inline"
    );
    let js = svc.client.get(svc.url("/page.js")).send().await.unwrap();
    assert!(js.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    let js = js.text().await.unwrap();
    assert!(
        js.contains("history.replaceState"),
        "the token leaves the URL"
    );
    assert!(
        !js.contains("new EventSource"),
        "the stream is read with the header"
    );
    // The API's answers carry them too, and are not cached.
    let r = svc
        .client
        .get(svc.url("/sessions"))
        .header("authorization", svc.auth())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.headers()["cache-control"], "no-store");
}

#[tokio::test]
async fn a_foreign_host_is_refused_dns_rebinding() {
    let svc = start().await;
    let port = svc.addr.port();
    let request = |host: Option<String>, version: &str| {
        let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
        format!(
            "GET /sessions {version}\r\n{host}Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        )
    };
    let refused = [
        Some(format!("localhost.evil.com:{port}")),
        Some(format!("127.0.0.1.nip.io:{port}")),
        Some(format!("evil.com:{port}")),
        Some("evil.com".to_owned()),
        Some(format!("127.0.0.1:{}", port.wrapping_add(1))),
        Some("127.0.0.1".to_owned()),
        Some(format!("localhost.:{port}")),
        Some(format!("user@127.0.0.1:{port}")),
        Some(format!("127.0.0.2:{port}")),
        Some(format!("0.0.0.0:{port}")),
        Some(String::new()),
        None,
    ];
    for host in refused {
        for version in ["HTTP/1.1", "HTTP/1.0"] {
            let status = svc.raw(&request(host.clone(), version)).await;
            assert!(
                status == 403 || status == 400,
                "Host {host:?} over {version}: {status}"
            );
        }
    }
    // Two Host headers, one of them right.
    let two = format!(
        "GET /sessions HTTP/1.1\r\nHost: evil.com\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    assert!([400, 403].contains(&svc.raw(&two).await));
    // An absolute-form target naming another host.
    let absolute = format!(
        "GET http://evil.com/sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    assert!([400, 403].contains(&svc.raw(&absolute).await));
    // The health check too: a rebound name gets nothing.
    let health =
        format!("GET /health HTTP/1.1\r\nHost: evil.com:{port}\r\nConnection: close\r\n\r\n");
    assert_eq!(svc.raw(&health).await, 403);
    for ok in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
    ] {
        assert_eq!(
            svc.raw(&request(Some(ok.clone()), "HTTP/1.1")).await,
            200,
            "{ok}"
        );
    }
}

#[tokio::test]
async fn configured_names_are_accepted_as_hosts() {
    let svc = start_with(
        |c| c.allowed_hosts = vec!["box.example".into(), "proxy.example:443".into()],
        |a| a,
    )
    .await;
    let port = svc.addr.port();
    let get =
        |host: &str| format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    assert_eq!(svc.raw(&get(&format!("box.example:{port}"))).await, 200);
    assert_eq!(svc.raw(&get("proxy.example:443")).await, 200);
    assert_eq!(svc.raw(&get("box.example:1")).await, 403);
    assert_eq!(svc.raw(&get(&format!("sub.box.example:{port}"))).await, 403);
}

#[tokio::test]
async fn cross_origin_and_form_posts_are_refused_csrf() {
    let svc = start().await;
    let port = svc.addr.port();
    let id = svc.open("victim", json!({ "turns": [] }), None).await;
    let post = |origin: Option<&str>, content_type: Option<&str>, auth: bool, body: &str| {
        let mut head = format!("POST /sessions/{id}/cancel HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
        if let Some(o) = origin {
            head.push_str(&format!("Origin: {o}\r\n"));
        }
        if let Some(t) = content_type {
            head.push_str(&format!("Content-Type: {t}\r\n"));
        }
        if auth {
            head.push_str(&format!("Authorization: Bearer {TOKEN}\r\n"));
        }
        format!(
            "{head}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // What a page of another site can send: a form, without the token.
    let form = "a=b";
    for (origin, content_type) in [
        (
            Some("http://evil.com"),
            Some("application/x-www-form-urlencoded"),
        ),
        (Some("null"), Some("application/x-www-form-urlencoded")),
        (Some("http://evil.com"), Some("text/plain")),
        (
            Some("http://evil.com"),
            Some("multipart/form-data; boundary=x"),
        ),
        (None, Some("application/x-www-form-urlencoded")),
    ] {
        let status = svc.raw(&post(origin, content_type, false, form)).await;
        assert!(
            [401, 403, 415].contains(&status),
            "{origin:?} {content_type:?}: {status}"
        );
        // Even with the token (a leaked one, or a browser that would attach it), no.
        let status = svc.raw(&post(origin, content_type, true, form)).await;
        assert!(
            [403, 415].contains(&status),
            "{origin:?} {content_type:?} with the token: {status}"
        );
    }
    // A foreign Origin with a JSON body and the token: refused too.
    for origin in [
        "http://evil.com",
        "null",
        &format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        &format!("http://localhost.evil.com:{port}"),
        &format!("https://127.0.0.1:{port}.evil.com"),
        &format!("http://127.0.0.1:{port}/path"),
    ] {
        let status = svc
            .raw(&post(Some(origin), Some("application/json"), true, "{}"))
            .await;
        assert_eq!(status, 403, "Origin {origin}");
    }
    // The same origin is fine.
    let status = svc
        .raw(&post(
            Some(&format!("http://127.0.0.1:{port}")),
            Some("application/json"),
            true,
            "{}",
        ))
        .await;
    assert_eq!(status, 202);
    // A DELETE that declares a form body is refused; without a body it is fine.
    let delete = format!(
        "DELETE /sessions/{id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: text/plain\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx"
    );
    assert_eq!(svc.raw(&delete).await, 415);
    let (_, list) = svc.get("/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "still open");
}

#[tokio::test]
async fn a_client_cannot_loosen_the_operators_permission_mode() {
    let svc = start().await;
    let bash = json!({ "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "echo ran" } } ] }, { "text": "done" } ] });
    for mode in ["bypassPermissions", "acceptEdits"] {
        let (status, body) = svc
            .post(
                "/sessions",
                json!({ "id": "loose", "permission_mode": mode, "script": bash }),
            )
            .await;
        assert_eq!(status, 403, "{mode}: {body}");
    }
    assert!(!svc.service().workspace_root().join("loose").exists());
    for mode in ["plan", "dontAsk", "default"] {
        let (status, body) = svc
            .post(
                "/sessions",
                json!({ "id": mode, "permission_mode": mode, "script": bash }),
            )
            .await;
        assert_eq!(status, 201, "{mode}: {body}");
        assert_eq!(body["permission_mode"], mode);
    }
    // Stricter modes hold: dontAsk denies the ask without asking anyone.
    let (_, r) = svc
        .post("/sessions/dontAsk/turns", json!({ "prompt": "go" }))
        .await;
    assert_eq!(r["calls"][0]["status"]["source"], "mode", "{r}");

    // When the operator allows it, bypassPermissions runs bash without an approval.
    let open = start_with(
        |c| c.max_mode = hookbus::PermissionMode::BypassPermissions,
        |a| a,
    )
    .await;
    let (status, _) = open
        .post(
            "/sessions",
            json!({ "id": "bypass", "permission_mode": "bypassPermissions", "script": bash }),
        )
        .await;
    assert_eq!(status, 201);
    let (_, r) = open
        .post("/sessions/bypass/turns", json!({ "prompt": "go" }))
        .await;
    assert_eq!(r["calls"][0]["status"]["status"], "completed", "{r}");

    // The operator's ceiling also caps the default: with plan as the ceiling, a session that
    // asks for nothing is plan.
    let strict = start_with(|c| c.max_mode = hookbus::PermissionMode::Plan, |a| a).await;
    let (_, body) = strict
        .post("/sessions", json!({ "id": "d", "script": bash }))
        .await;
    assert_eq!(body["permission_mode"], "plan");
}

#[tokio::test]
async fn the_operators_rules_apply_to_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({ "permissions": { "deny": ["Bash(echo *)"] } }).to_string(),
    )
    .unwrap();
    let svc = start_with(
        |c| {
            c.max_mode = hookbus::PermissionMode::BypassPermissions;
            c.permissions =
                Some(hookbus::PermissionConfig::from_settings_files(&[&settings]).unwrap());
        },
        |a| a,
    )
    .await;
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "b", "permission_mode": "bypassPermissions", "script": { "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "echo no" } } ] }, { "text": "done" } ] } }),
        )
        .await;
    assert_eq!(status, 201);
    let (_, r) = svc
        .post("/sessions/b/turns", json!({ "prompt": "go" }))
        .await;
    assert_eq!(r["calls"][0]["status"]["source"], "rule", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_see_approve_or_cancel_another_tokens_session() {
    let svc = start().await;
    let other = svc.as_token(OTHER);
    let id = svc
        .open(
            "mine",
            json!({ "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "echo mine" } } ] }, { "text": "done" } ] }),
            None,
        )
        .await;
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    // The other identity sees nothing of it...
    let (_, list) = other.get("/sessions").await;
    assert_eq!(list["sessions"], json!([]));
    assert!(other.approvals().await.is_empty());
    for (status, what) in [
        (other.get("/sessions/mine").await.0, "info"),
        (other.get("/sessions/mine/events").await.0, "events"),
        (
            other
                .post("/sessions/mine/turns", json!({ "prompt": "x" }))
                .await
                .0,
            "turn",
        ),
        (
            other.post("/sessions/mine/cancel", json!({})).await.0,
            "cancel",
        ),
        (other.delete("/sessions/mine").await.0, "delete"),
        (
            other
                .answer(&approval, json!({ "decision": "allow" }))
                .await
                .0,
            "answer",
        ),
        (other.get("/metrics").await.0, "metrics"),
    ] {
        let expected = if what == "metrics" { 403 } else { 404 };
        assert_eq!(status, expected, "{what}");
    }
    // ... and the refusal looks like a missing session.
    let (_, missing) = other.get("/sessions/nope").await;
    let (_, theirs) = other.get("/sessions/mine").await;
    assert_eq!(
        missing["error"].as_str().unwrap().replace("nope", "mine"),
        theirs["error"].as_str().unwrap()
    );
    // Nothing changed: the approval is still pending, the session still open.
    assert_eq!(svc.approvals().await.len(), 1);
    let (status, _) = svc.answer(&approval, json!({ "decision": "allow" })).await;
    assert_eq!(status, 200);
    assert_eq!(turn.await.unwrap()["reason"], "completed");
    // The other identity's own sessions are its own.
    let theirs = other.open("theirs", json!({ "turns": [] }), None).await;
    let (_, list) = svc.get("/sessions").await;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["mine"]);
    assert_eq!(svc.delete(&format!("/sessions/{theirs}")).await.0, 404);
    assert_eq!(other.delete(&format!("/sessions/{theirs}")).await.0, 200);
}

#[tokio::test]
async fn past_the_session_limit_429_and_a_refused_open_costs_nothing() {
    let svc = start_with(|c| c.limits.max_sessions = 3, |a| a).await;
    for i in 0..3 {
        svc.open(&format!("n{i}"), json!({ "turns": [] }), None)
            .await;
    }
    let (status, body) = svc
        .post(
            "/sessions",
            json!({ "id": "n3", "script": { "turns": [] } }),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(svc.delete("/sessions/n0").await.0, 200);
    // Refused opens (bad script, bad mode, id in use) do not take the place.
    for bad in [
        json!({ "id": "x", "script": { "turnz": [] } }),
        json!({ "id": "x", "script": {}, "permission_mode": "bypassPermissions" }),
        json!({ "id": "n1", "script": {} }),
    ] {
        let (status, _) = svc.post("/sessions", bad).await;
        assert!((400..500).contains(&status) && status != 429, "{status}");
    }
    svc.open("n3", json!({ "turns": [] }), None).await;
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "n4", "script": { "turns": [] } }),
        )
        .await;
    assert_eq!(status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_its_workspace_goes() {
    let svc = start_with(|c| c.limits.idle_expiry = Duration::from_millis(300), |a| a).await;
    let id = svc.open("idle", json!({ "turns": [] }), None).await;
    let workspace = svc.service().workspace_root().join(&id);
    assert!(workspace.is_dir());
    let stream = svc.collect_events(&id).await;
    let events = tokio::time::timeout(Duration::from_secs(10), stream)
        .await
        .expect("the idle session ended")
        .unwrap();
    let end = events.last().unwrap();
    assert_eq!(end["hook_event_name"], "SessionEnd");
    assert_eq!(end["reason"], "expired");
    let (_, list) = svc.get("/sessions").await;
    assert_eq!(list["sessions"], json!([]));
    for _ in 0..100 {
        if !workspace.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!workspace.exists());
    // A session in use does not expire.
    let busy = svc.open("busy", json!({ "turns": [ { "text": "a" }, { "text": "b" }, { "text": "c" }, { "text": "d" }, { "text": "e" }, { "text": "f" } ] }), None).await;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (status, _) = svc
            .post(&format!("/sessions/{busy}/turns"), json!({ "prompt": "x" }))
            .await;
        assert_eq!(status, 200);
    }
}

#[tokio::test]
async fn history_is_capped_in_bytes_and_turn_responses_are_capped() {
    let svc = start_with(
        |c| {
            c.limits.event_history_bytes = 64 * 1024;
            c.limits.max_response_bytes = 256 * 1024;
            c.limits.max_field_bytes = 16 * 1024;
            c.limits.tool_output_bytes = 8 * 1024;
        },
        |a| a,
    )
    .await;
    // A 20 KB file read 200 times in one step: 4 MB of tool output from a small request.
    let calls: Vec<Value> = (0..200)
        .map(|i| json!({ "id": format!("r{i}"), "name": "read_file", "input": { "path": "big.txt" } }))
        .collect();
    let script = json!({
        "turns": [ { "tool_calls": calls }, { "text": "done" } ],
        "files": { "big.txt": "x".repeat(20_000) }
    });
    svc.open("big", script, None).await;
    let started = std::time::Instant::now();
    let response = svc
        .client
        .post(svc.url("/sessions/big/turns"))
        .header("authorization", svc.auth())
        .json(&json!({ "prompt": "p".repeat(100_000) }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.len() <= 256 * 1024, "{} bytes", bytes.len());
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["reason"], "completed");
    assert!(
        v["truncated"].as_str().is_some(),
        "it says what it left out"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let (_, info) = svc.get("/sessions/big").await;
    let history = &info["history"];
    assert!(history["bytes"].as_u64().unwrap() <= 64 * 1024, "{history}");
    assert!(history["dropped"].as_u64().unwrap() > 0, "{history}");
    // A body past the limit is refused before it is read whole.
    let huge = "y".repeat(2 << 20);
    let r = svc
        .client
        .post(svc.url("/sessions/big/turns"))
        .header("authorization", svc.auth())
        .json(&json!({ "prompt": huge }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
}

/// A client picks a model only among those the operator offers, by name; it can never point a
/// session at a URL of its own.
#[cfg(feature = "providers")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_uses_a_provider_the_operator_offers_and_no_other() {
    use common::model_server::{anthropic_answer, serve, Reply};
    use hookbus::providers::AnthropicProvider;

    let (model, requests) = serve(vec![Reply::Sse(anthropic_answer(
        "From the model.",
        &[],
        (3, 4),
    ))])
    .await;
    let svc = start_with(
        |c| {
            let provider = AnthropicProvider::new("sk-operator", "claude-test")
                .base_url(format!("http://{model}"));
            c.providers
                .insert("anthropic", std::sync::Arc::new(provider));
        },
        |a| a,
    )
    .await;
    let (status, body) = svc
        .post("/sessions", json!({ "id": "m", "provider": "anthropic" }))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, r) = svc
        .post("/sessions/m/turns", json!({ "prompt": "hi" }))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["text"], "From the model.", "{r}");
    let seen = requests.requests.lock().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0["x-api-key"], "sk-operator");

    for body in [
        json!({ "id": "x", "provider": "openai" }),
        json!({ "id": "y", "provider": "anthropic", "base_url": "http://evil.example" }),
    ] {
        let (status, r) = svc.post("/sessions", body.clone()).await;
        if body.get("base_url").is_some() {
            // A field naming a URL is refused: nothing the client sends points a session elsewhere.
            assert!(status == 400 || status == 422, "{status} {r}");
        } else {
            assert_eq!(status, 400, "{r}");
            assert!(r.to_string().contains("offers anthropic"), "{r}");
        }
    }
    assert_eq!(requests.requests.lock().len(), 1);
}
