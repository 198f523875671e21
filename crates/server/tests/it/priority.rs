//! Priority has limits (issue 18.5): a member submits at most at its team's ceiling
//! (`max_priority`, default 100; admins may go above it), and only admins set the ceiling and
//! whether a team may preempt other teams.

use std::time::Duration;

use gantry_store::{Role, User};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestServer;

fn token(s: &TestServer, name: &str, role: Role, teams: &[&str]) -> String {
    let user = User { name: name.into(), role, teams: teams.iter().map(|t| (*t).to_owned()).collect() };
    gantry_server::create_user_token(&*s.store, &user, Duration::from_secs(3600)).expect("user token")
}

async fn submit(s: &TestServer, token: &str, priority: i32) -> (StatusCode, Value) {
    let body =
        json!({"command": ["true"], "team": "vision", "priority": priority, "wait_for_capacity": true});
    let resp =
        s.http.post(format!("{}/v1/jobs", s.url)).bearer_auth(token).json(&body).send().await.expect("send");
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

async fn set_team(s: &TestServer, token: &str, body: Value) -> StatusCode {
    let put = s.http.put(format!("{}/v1/teams/vision", s.url)).bearer_auth(token).json(&body);
    put.send().await.expect("send").status()
}

#[tokio::test]
async fn a_member_above_the_teams_priority_ceiling_gets_422_naming_it_until_an_admin_raises_it() {
    let s = TestServer::start().await;
    let alice = token(&s, "alice", Role::Member, &["vision"]);
    let (status, body) = submit(&s, &alice, 1000).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("1000 is above team vision's ceiling of 100"), "{error}");
    assert_eq!(submit(&s, &alice, 100).await.0, StatusCode::CREATED, "the ceiling itself is allowed");
    assert_eq!(submit(&s, &s.token, 1000).await.0, StatusCode::CREATED, "an admin may go above it");

    let olga = token(&s, "olga", Role::Operator, &[]);
    assert_eq!(
        set_team(&s, &olga, json!({"gpu_quota": null, "max_priority": 500})).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        set_team(&s, &s.token, json!({"gpu_quota": null, "max_priority": 5000})).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let raise = json!({"gpu_quota": null, "max_priority": 500, "preempt_other_teams": true});
    assert_eq!(set_team(&s, &s.token, raise).await, StatusCode::NO_CONTENT);
    assert_eq!(submit(&s, &alice, 400).await.0, StatusCode::CREATED);
    // A later quota change leaves the ceiling as it was.
    assert_eq!(set_team(&s, &olga, json!({"gpu_quota": 2})).await, StatusCode::NO_CONTENT);
    let teams: Vec<Value> = crate::json_of(s.get("/v1/teams")).await;
    let vision = teams.iter().find(|t| t["name"] == "vision").expect("vision listed");
    assert_eq!(
        (
            vision["max_priority"].as_i64(),
            vision["preempt_other_teams"].as_bool(),
            vision["gpu_quota"].as_i64()
        ),
        (Some(500), Some(true), Some(2)),
        "{vision}"
    );
}
