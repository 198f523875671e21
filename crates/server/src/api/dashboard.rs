//! The web dashboard: one page of static assets compiled into the binary (plain HTML, CSS and
//! JavaScript modules under `crates/server/assets/dashboard/`; no build step, nothing fetched
//! from elsewhere). The assets are public and hold no data: the page asks the same API as the
//! CLI with the token the user pastes, so a member sees only its teams, exactly as the API
//! decides ([`crate::auth::Principal`]). Live updates come from `/v1/watch` (see
//! [`super::watch`]), read with `fetch()` and the same Authorization header.
//!
//! Every answer carries a Content-Security-Policy that allows scripts and styles from this
//! origin only (no inline code), `nosniff`, and forbids framing.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy on every dashboard answer: scripts and styles from files of this origin only.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("../../assets/dashboard/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Everything the page loads, by file name under `/dashboard/`.
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("boot.js", JS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("view.js", JS),
    asset!("fleet.js", JS),
    asset!("jobs.js", JS),
    asset!("job.js", JS),
    asset!("nodes.js", JS),
    asset!("teams.js", JS),
    asset!("findings.js", JS),
    asset!("services.js", JS),
    asset!("live.js", JS),
];

/// `/` (the page) and `/dashboard/{file}` (its assets), public: nobody's data is in them.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/", get(index)).route("/dashboard/{file}", get(file))
}

async fn index() -> Response {
    serve("index.html")
}

async fn file(Path(name): Path<String>) -> Response {
    serve(&name)
}

fn serve(name: &str) -> Response {
    let mut response = match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Revalidate on each load so an upgraded server never runs with stale scripts.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(a.body).expect("utf-8");
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let file = line.rsplit("'./").next().and_then(|r| r.split('\'').next()).expect("import path");
                assert!(ASSETS.iter().any(|b| b.name == file), "{} imports {file}, not embedded", a.name);
            }
        }
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let page = std::str::from_utf8(ASSETS[0].body).expect("utf-8");
        assert!(!page.contains("<style"), "inline <style>");
        assert!(!page.contains("style="), "inline style attribute");
        for tag in page.split("<script").skip(1) {
            assert!(tag.split('>').next().is_some_and(|attrs| attrs.contains("src=")), "inline <script>");
        }
    }
}
