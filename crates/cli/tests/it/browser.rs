//! A headless Chromium driven through chromedriver's W3C WebDriver HTTP API (plain JSON over
//! reqwest). [`Browser::start`] gives `None` — after printing why — when Chromium is missing
//! and `CI` is unset; in CI a missing browser fails the test (`.ci/run` installs Debian's
//! `chromium` and `chromium-driver`).
//!
//! `gantry up` serves the dashboard over TLS with its cluster CA. The browser trusts that CA and
//! no other: it gets `--ignore-certificate-errors-spki-list` with the CA's public-key hash
//! ([`crate::harness::Cluster::ca_spki`]), and the server sends the CA after its certificate, so a
//! chain from the cluster's CA is accepted and any other certificate is still refused.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// A chromedriver process with one browser session.
pub struct Browser {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    session: String,
    driver: Child,
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a 1400×900 window that trusts the CA
    /// whose public key hashes to `spki_pin` (base64 SHA-256), if given.
    pub fn start(spki_pin: Option<&str>) -> Option<Self> {
        Self::start_in(spki_pin, None)
    }

    /// [`Browser::start`] with `HOME` set to `home`, whose `.pki/nssdb` is the NSS database
    /// Chromium trusts certificates from.
    pub fn start_in(spki_pin: Option<&str>, home: Option<&Path>) -> Option<Self> {
        let found = (
            on_path("chromedriver"),
            ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|b| on_path(b)),
        );
        let (Some(driver_bin), Some(chrome)) = found else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have chromium and chromedriver (.ci/run installs them)"
            );
            eprintln!(
                "note: skipping the browser test: chromium or chromedriver is not installed (apt-get install chromium chromium-driver)"
            );
            return None;
        };
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let mut driver = Command::new(driver_bin);
        if let Some(home) = home {
            driver.env("HOME", home);
        }
        let driver = driver
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let http = http();
        let mut browser = Self { rt, http, session: format!("http://127.0.0.1:{port}"), driver };
        let deadline = Instant::now() + Duration::from_secs(20);
        while browser.call(reqwest::Method::GET, "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1400,900".into(),
            "--hide-scrollbars".into(),
            "--lang=en-GB".into(),
        ];
        if let Some(pin) = spki_pin {
            args.push(format!("--ignore-certificate-errors-spki-list={pin}"));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chrome, "args": args}, "goog:loggingPrefs": {"browser": "ALL"}}}});
        let created = browser.call(reqwest::Method::POST, "/session", Some(caps)).expect("new session");
        let id = created["sessionId"].as_str().expect("session id").to_owned();
        browser.session = format!("{}/session/{id}", browser.session);
        Some(browser)
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.session);
        self.rt.block_on(async {
            let mut req = self.http.request(method, url);
            if let Some(body) = body {
                req = req.json(&body);
            }
            let resp = req.send().await.map_err(|e| e.to_string())?;
            let ok = resp.status().is_success();
            let value: Value = resp.json().await.map_err(|e| e.to_string())?;
            if ok { Ok(value["value"].clone()) } else { Err(value["value"].to_string()) }
        })
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).unwrap_or_else(|e| panic!("webdriver {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url }));
    }

    /// Navigates to `url`; the WebDriver error (e.g. `insecure certificate`) if it fails.
    pub fn try_goto(&self, url: &str) -> Result<(), String> {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url }))).map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns what it returns.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> Value {
        let found = self.post("/element", json!({ "using": "css selector", "value": css }));
        found.as_object().and_then(|o| o.values().next().cloned()).expect("element reference")
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.post(&format!("/element/{}/value", id.as_str().expect("id")), json!({ "text": text }));
    }

    pub fn click(&self, css: &str) {
        let id = self.find(css);
        self.post(&format!("/element/{}/click", id.as_str().expect("id")), json!({}));
    }

    /// Polls a JavaScript expression until it is truthy; returns its value.
    pub fn wait_for(&self, what: &str, expression: &str, timeout: Duration) -> Value {
        self.try_wait_for(expression, timeout).unwrap_or_else(|| {
            let body = self.js("return document.body.innerText.slice(0, 2000);", json!([]));
            panic!("timed out waiting for {what}; the page shows:\n{}", body.as_str().unwrap_or_default())
        })
    }

    /// Polls a JavaScript expression until it is truthy (its value) or `timeout` passes (`None`).
    /// An expression that throws (the page is being loaded again, or is the browser's error
    /// page) counts as not yet.
    pub fn try_wait_for(&self, expression: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let script = json!({ "script": format!("return {expression};"), "args": [] });
        loop {
            let v = self
                .call(reqwest::Method::POST, "/execute/sync", Some(script.clone()))
                .unwrap_or(Value::Null);
            if !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0)) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends one Chrome DevTools Protocol command (e.g. `Network.setBlockedURLs`) to the page.
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.post("/goog/cdp/execute", json!({ "cmd": cmd, "params": params }))
    }

    /// What the page wrote to its console (and the browser's network errors) since the last call.
    pub fn console(&self) -> Value {
        self.call(reqwest::Method::POST, "/se/log", Some(json!({ "type": "browser" })))
            .unwrap_or_else(Value::String)
    }

    /// Writes a PNG of the viewport to `dir/name.png`.
    pub fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let data = self.call(reqwest::Method::GET, "/screenshot", None).expect("screenshot");
        let png =
            base64::engine::general_purpose::STANDARD.decode(data.as_str().expect("base64")).expect("png");
        std::fs::create_dir_all(dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call(reqwest::Method::DELETE, "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A plain-HTTP client (reqwest is built without a default TLS provider).
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Where screenshots go: `GANTRY_SCREENSHOTS`, else a scratch directory.
pub fn screenshot_dir() -> PathBuf {
    // `GANTRY_SCREENSHOTS=docs/dashboard` refreshes the committed pictures; otherwise they go to
    // a scratch directory, so a test run leaves the tree as it was.
    let dir = std::env::var_os("GANTRY_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("gantry-screenshots"));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
