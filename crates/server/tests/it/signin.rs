//! The dashboard's one-time sign-in (`gantry dashboard`, issue 20.7): a user's token asks for a
//! code, the page trades it once for a session of the same user; nothing else signs in with it.

use std::time::Duration;

use gantry_store::{Role, User};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestServer;

fn token(s: &TestServer, name: &str, role: Role, teams: &[&str]) -> String {
    let user = User { name: name.into(), role, teams: teams.iter().map(|t| (*t).to_owned()).collect() };
    gantry_server::create_user_token(&*s.store, &user, Duration::from_secs(3600)).expect("user token")
}

async fn new_code(s: &TestServer, token: &str) -> (StatusCode, Value) {
    let resp =
        s.http.post(format!("{}/v1/signin-codes", s.url)).bearer_auth(token).send().await.expect("send");
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

async fn redeem(s: &TestServer, code: &str) -> (StatusCode, Value) {
    let resp =
        s.http.post(format!("{}/v1/signin", s.url)).json(&json!({"code": code})).send().await.expect("send");
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

async fn whoami(s: &TestServer, token: &str) -> Value {
    let resp = s.http.get(format!("{}/v1/whoami", s.url)).bearer_auth(token).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.expect("json")
}

#[tokio::test]
async fn a_sign_in_code_gives_its_owner_a_session_once_and_is_not_the_token() {
    let s = TestServer::start().await;
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let (status, body) = new_code(&s, &alice).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let code = body["code"].as_str().expect("code").to_owned();
    assert!(!alice.contains(&code) && !code.contains(&alice), "the code is not the token");

    let (status, session) = redeem(&s, &code).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let secret = session["token"].as_str().expect("session token");
    assert_ne!(secret, alice);
    let me = whoami(&s, secret).await;
    assert_eq!((me["user"].as_str(), me["role"].as_str()), (Some("alice"), Some("member")), "{me}");
    assert_eq!(me["teams"], json!(["vision"]), "{me}");
    let expires = session["expires_at"].as_i64().expect("expires");
    assert!(
        expires <= gantry_server::now_ms() + 12 * 3_600_000
            && expires <= me["expires_at"].as_i64().unwrap_or(i64::MAX)
    );
    // The session lives no longer than alice's own token (one hour here).
    assert!(expires <= gantry_server::now_ms() + 3_600_000, "{session}");

    let (status, again) = redeem(&s, &code).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "single use: {again}");
    assert!(again["error"].as_str().unwrap_or_default().contains("gantry dashboard"), "{again}");
    assert_eq!(redeem(&s, "made-up").await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_code_dies_with_its_token_and_node_or_join_tokens_get_none() {
    let s = TestServer::start().await;
    let bob = token(&s, "bob", Role::Member, &["nlp"]);
    let (_, body) = new_code(&s, &bob).await;
    let code = body["code"].as_str().expect("code").to_owned();
    let me = whoami(&s, &bob).await;
    let id = me["token_id"].as_i64().expect("id");
    let revoke =
        s.http.delete(format!("{}/v1/tokens/{id}", s.url)).bearer_auth(&s.token).send().await.expect("send");
    assert_eq!(revoke.status(), StatusCode::NO_CONTENT);
    let (status, refused) = redeem(&s, &code).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");

    let join =
        gantry_server::create_join_token(&*s.store, Some("n1"), Duration::from_secs(600)).expect("join");
    assert_eq!(new_code(&s, &join).await.0, StatusCode::FORBIDDEN);
    let node = gantry_server::create_node_credential(&*s.store, "n2").expect("node");
    assert_eq!(new_code(&s, &node).await.0, StatusCode::FORBIDDEN);
    let (status, _) = new_code(&s, "gty_not-a-token").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
