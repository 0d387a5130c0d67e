//! The console page: static files with no data in them, served without a token. The page takes
//! the token from its URL fragment (`/#token=…`, which browsers never send to the server),
//! forgets the fragment, and sends the token on every request it makes.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::Service;

const HTML: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// The page's routes: `/`, `/page.js`, `/page.css`.
pub(crate) fn routes() -> Router<Service> {
    Router::new()
        .route(
            "/",
            get(|| async { ([(CONTENT_TYPE, "text/html; charset=utf-8")], HTML).into_response() }),
        )
        .route(
            "/page.js",
            get(|| async {
                ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
            }),
        )
        .route(
            "/page.css",
            get(|| async { ([(CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response() }),
        )
}
