//! The attacks of issue 7, tried against the API as a hostile user, a member of another team and
//! a forged or stolen agent would: each must fail with a clear 401/403/404/409/422 or change
//! nothing.

use std::time::Duration;

use gantry_store::{JobState, Role, User};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestServer;

const HOUR: Duration = Duration::from_secs(3600);

fn user(name: &str, role: Role, teams: &[&str]) -> User {
    User { name: name.into(), role, teams: teams.iter().map(|t| (*t).to_owned()).collect() }
}

impl TestServer {
    fn token_for(&self, name: &str, role: Role, teams: &[&str]) -> String {
        gantry_server::create_user_token(&*self.store, &user(name, role, teams), HOUR).expect("user token")
    }

    fn as_(&self, token: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url)).bearer_auth(token)
    }

    async fn submit_as(&self, token: &str, body: Value) -> Value {
        let resp = self.as_(token, reqwest::Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::CREATED, "{body}");
        resp.json().await.expect("json")
    }

    async fn register(&self, credential: &str, node: &str, gpus: &[&str]) -> reqwest::Response {
        let gpus: Vec<Value> = gpus
            .iter()
            .enumerate()
            .map(|(i, u)| json!({"uuid": u, "index": i, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}))
            .collect();
        let body =
            json!({"node_id": node, "hostname": node, "cpu_milli": 8000, "memory_mib": 65536, "gpus": gpus});
        self.as_(credential, reqwest::Method::POST, "/v1/agent/register")
            .json(&body)
            .send()
            .await
            .expect("send")
    }
}

async fn status(req: reqwest::RequestBuilder) -> StatusCode {
    req.send().await.expect("send").status()
}

#[tokio::test]
async fn a_member_of_another_team_cannot_list_read_log_or_cancel_a_job() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    let id =
        s.submit_as(&a, json!({"command": ["echo", "secret-argument"]})).await["id"].as_i64().expect("id");
    let listed: Vec<Value> = crate::json_of(s.as_(&b, reqwest::Method::GET, "/v1/jobs")).await;
    assert!(listed.is_empty(), "bob sees {listed:?}");
    let listed: Vec<Value> = s
        .as_(&b, reqwest::Method::GET, "/v1/jobs?team=vision")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert!(listed.is_empty(), "naming the team does not widen the scope: {listed:?}");
    for path in [format!("/v1/jobs/{id}"), format!("/v1/jobs/{id}/logs")] {
        assert_eq!(status(s.as_(&b, reqwest::Method::GET, &path)).await, StatusCode::NOT_FOUND, "{path}");
    }
    let cancel = s.as_(&b, reqwest::Method::POST, &format!("/v1/jobs/{id}/cancel"));
    assert_eq!(status(cancel).await, StatusCode::NOT_FOUND);
    let submit =
        s.as_(&b, reqwest::Method::POST, "/v1/jobs").json(&json!({"command": ["true"], "team": "vision"}));
    assert_eq!(status(submit).await, StatusCode::FORBIDDEN);
    let job = s.store.job(id).expect("read").expect("job");
    assert_ne!(job.state, JobState::Cancelled);
    // Alice sees her own job, command line included.
    let mine: Vec<Value> = crate::json_of(s.as_(&a, reqwest::Method::GET, "/v1/jobs")).await;
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["command"][1], "secret-argument");
}

#[tokio::test]
async fn another_teams_request_id_creates_a_job_of_ours_instead_of_returning_theirs() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    let theirs = s.submit_as(&a, json!({"command": ["true"], "request_id": "run-1"})).await;
    let ours = s.submit_as(&b, json!({"command": ["true"], "request_id": "run-1"})).await;
    assert_eq!(ours["created"], true);
    assert_ne!(ours["id"], theirs["id"]);
    let again = s.submit_as(&b, json!({"command": ["true"], "request_id": "run-1"})).await;
    assert_eq!((again["id"].clone(), again["created"].clone()), (ours["id"].clone(), json!(false)));
}

#[tokio::test]
async fn viewers_read_operators_set_quotas_and_neither_changes_jobs() {
    let s = TestServer::start().await;
    let member = s.token_for("alice", Role::Member, &["vision"]);
    let viewer = s.token_for("victor", Role::Viewer, &["vision"]);
    let operator = s.token_for("olga", Role::Operator, &[]);
    let id = s.submit_as(&member, json!({"command": ["sleep", "60"]})).await["id"].as_i64().expect("id");
    assert_eq!(status(s.as_(&viewer, reqwest::Method::GET, &format!("/v1/jobs/{id}"))).await, StatusCode::OK);
    assert_eq!(
        status(s.as_(&operator, reqwest::Method::GET, &format!("/v1/jobs/{id}"))).await,
        StatusCode::OK
    );
    for token in [&viewer, &operator] {
        let cancel = s.as_(token, reqwest::Method::POST, &format!("/v1/jobs/{id}/cancel"));
        assert_eq!(status(cancel).await, StatusCode::FORBIDDEN);
        let submit = s
            .as_(token, reqwest::Method::POST, "/v1/jobs")
            .json(&json!({"command": ["true"], "team": "vision"}));
        assert_eq!(status(submit).await, StatusCode::FORBIDDEN);
        let mint = s.as_(token, reqwest::Method::POST, "/v1/tokens").json(&json!({"team": "vision"}));
        assert_eq!(status(mint).await, StatusCode::FORBIDDEN);
    }
    let quota = |t: &str| s.as_(t, reqwest::Method::PUT, "/v1/teams/vision").json(&json!({"gpu_quota": 1}));
    assert_eq!(status(quota(&operator)).await, StatusCode::NO_CONTENT);
    assert_eq!(status(quota(&member)).await, StatusCode::FORBIDDEN);
    assert_eq!(status(quota(&viewer)).await, StatusCode::FORBIDDEN);
    for path in ["/metrics", "/v1/audit", "/v1/users"] {
        assert_eq!(status(s.as_(&member, reqwest::Method::GET, path)).await, StatusCode::FORBIDDEN, "{path}");
    }
}

#[tokio::test]
async fn a_revoked_or_expired_token_is_refused_on_its_next_request() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    assert_eq!(status(s.as_(&a, reqwest::Method::GET, "/v1/jobs")).await, StatusCode::OK);
    let me: Value = crate::json_of(s.as_(&a, reqwest::Method::GET, "/v1/whoami")).await;
    let id = me["token_id"].as_i64().expect("id");
    assert!(me["expires_at"].as_i64().is_some(), "tokens expire: {me}");
    // Bob may not revoke Alice's token, nor learn that it exists.
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    let revoke = |t: &str| s.as_(t, reqwest::Method::DELETE, &format!("/v1/tokens/{id}"));
    assert_eq!(status(revoke(&b)).await, StatusCode::NOT_FOUND);
    assert_eq!(status(revoke(&s.token)).await, StatusCode::NO_CONTENT);
    let resp = s.as_(&a, reqwest::Method::GET, "/v1/jobs").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.text().await.expect("text").contains("revoked"));
    let short = s
        .post("/v1/tokens")
        .json(&json!({"team": "vision", "user": "carol", "ttl_seconds": 1}))
        .send()
        .await
        .expect("send")
        .json::<Value>()
        .await
        .expect("json")["token"]
        .as_str()
        .expect("token")
        .to_owned();
    assert_eq!(status(s.as_(&short, reqwest::Method::GET, "/v1/jobs")).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resp = s.as_(&short, reqwest::Method::GET, "/v1/jobs").send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.text().await.expect("text").contains("expired"));
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_repeated_failures_get_429() {
    let s = TestServer::start().await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let req =
            s.http.get(format!("{}/v1/jobs", s.url)).header("authorization", format!("{scheme} {}", s.token));
        assert_eq!(status(req).await, StatusCode::OK, "{scheme}");
    }
    let mut last = StatusCode::OK;
    for _ in 0..=gantry_server::auth::FAILURE_LIMIT {
        last = status(s.http.get(format!("{}/v1/jobs", s.url)).bearer_auth("gty_guess")).await;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    // Only failures are throttled: a valid token from the same address (the node's own agent,
    // another user on the machine) keeps working, so spraying bad tokens locks nobody out.
    assert_eq!(status(s.get("/v1/jobs")).await, StatusCode::OK);
    let missing = s.http.get(format!("{}/v1/jobs", s.url));
    assert_eq!(status(missing).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_join_token_works_once_and_only_for_its_node() {
    let s = TestServer::start().await;
    let join = gantry_server::create_join_token(&*s.store, Some("n1"), HOUR).expect("join");
    let post =
        |node: &str| s.as_(&join, reqwest::Method::POST, "/v1/agent/join").json(&json!({"node_id": node}));
    assert_eq!(status(post("n2")).await, StatusCode::FORBIDDEN);
    let joined: Value = post("n1").send().await.expect("send").json().await.expect("json");
    let credential = joined["credential"].as_str().expect("credential").to_owned();
    let again = post("n1").send().await.expect("send");
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED);
    assert!(again.text().await.expect("text").contains("already used"));
    // The join token opens nothing else, and the credential acts as its node only.
    assert_eq!(status(s.as_(&join, reqwest::Method::GET, "/v1/jobs")).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(s.as_(&credential, reqwest::Method::GET, "/v1/jobs")).await, StatusCode::FORBIDDEN);
    assert_eq!(s.register(&credential, "n1", &["GPU-1"]).await.status(), StatusCode::OK);
    // A join token made for any node cannot take over node n1 while it is up.
    let any = gantry_server::create_join_token(&*s.store, None, HOUR).expect("join");
    let takeover = s.as_(&any, reqwest::Method::POST, "/v1/agent/join").json(&json!({"node_id": "n1"}));
    assert_eq!(status(takeover).await, StatusCode::CONFLICT);
    assert_eq!(
        s.register(&credential, "n1", &["GPU-1"]).await.status(),
        StatusCode::OK,
        "n1 keeps its credential"
    );
    let expired = gantry_server::create_join_token(&*s.store, None, Duration::from_millis(1)).expect("join");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let late = s.as_(&expired, reqwest::Method::POST, "/v1/agent/join").json(&json!({"node_id": "n3"}));
    assert_eq!(status(late).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_node_credential_cannot_register_as_another_node_steal_its_gpus_or_end_its_jobs() {
    let s = TestServer::start().await;
    let a = gantry_server::create_node_credential(&*s.store, "node-a").expect("credential");
    let b = gantry_server::create_node_credential(&*s.store, "node-b").expect("credential");
    let epoch_a =
        s.register(&a, "node-a", &["GPU-A0"]).await.json::<Value>().await.expect("json")["epoch"].clone();
    assert_eq!(s.register(&b, "node-b", &[]).await.status(), StatusCode::OK);
    // Re-registering node-a with b's credential would bump its epoch and kill its jobs.
    assert_eq!(s.register(&b, "node-a", &["GPU-A0"]).await.status(), StatusCode::FORBIDDEN);
    // Claiming a GPU that a live node holds.
    let steal = s.register(&b, "node-b", &["GPU-A0"]).await;
    assert_eq!(steal.status(), StatusCode::CONFLICT);
    let nodes = s.store.nodes().expect("nodes");
    assert_eq!(nodes.iter().find(|n| n.id == "node-a").map(|n| n.epoch), epoch_a.as_u64());
    assert!(s.store.gpus().expect("gpus").iter().all(|g| g.info.uuid != "GPU-A0" || g.node_id == "node-a"));
    // A job placed on node-a; node-b reports it finished.
    let id = s
        .post("/v1/jobs")
        .json(&json!({"command": ["sleep", "60"], "gpus": 1}))
        .send()
        .await
        .expect("send")
        .json::<Value>()
        .await
        .expect("json")["id"]
        .as_i64()
        .expect("id");
    for _ in 0..50 {
        if s.store.job(id).expect("job").is_some_and(|j| j.state == JobState::Scheduled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.store.job(id).expect("job").expect("job").node_id.as_deref(), Some("node-a"));
    let forged = json!({"node_id": "node-b", "epoch": 1, "gpus": [],
        "jobs": [{"job_id": id, "attempt": 1, "exit": {"exit_code": 0, "reason": null}}],
        "logs": [{"job_id": id, "attempt": 1, "stream": "stdout", "offset": 0, "data": "Zm9yZ2VkCg=="}]});
    let resp =
        s.as_(&b, reqwest::Method::POST, "/v1/agent/heartbeat").json(&forged).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK, "node-b's own heartbeat is fine");
    assert_eq!(
        s.store.job(id).expect("job").expect("job").state,
        JobState::Scheduled,
        "but it changes nothing"
    );
    // Registering again while claiming to still run node-a's job keeps nothing of node-a's.
    let claim = json!({"node_id": "node-b", "hostname": "b", "cpu_milli": 8000, "memory_mib": 65536,
        "gpus": [], "attempts": [{"job_id": id, "attempt": 1}]});
    let resp =
        s.as_(&b, reqwest::Method::POST, "/v1/agent/register").json(&claim).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let job = s.store.job(id).expect("job").expect("job");
    assert_eq!(
        (job.node_id.as_deref(), job.epoch, job.state),
        (Some("node-a"), epoch_a.as_u64(), JobState::Scheduled)
    );
    let as_a = json!({"node_id": "node-a", "epoch": epoch_a, "gpus": [], "jobs": []});
    let resp =
        s.as_(&b, reqwest::Method::POST, "/v1/agent/heartbeat").json(&as_a).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    // A user token is not an agent credential either.
    assert_eq!(s.register(&s.token, "node-c", &[]).await.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn every_change_and_refusal_is_audited_and_the_chain_verifies() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let id = s.submit_as(&a, json!({"command": ["true"]})).await["id"].as_i64().expect("id");
    let denied = s.as_(&a, reqwest::Method::PUT, "/v1/teams/vision").json(&json!({"gpu_quota": 9}));
    assert_eq!(status(denied).await, StatusCode::FORBIDDEN);
    let rows: Vec<Value> = s.get("/v1/audit").send().await.expect("send").json().await.expect("json");
    let submit = rows.iter().find(|r| r["action"] == "job.submit").expect("submission audited");
    assert_eq!(submit["actor"], "alice");
    assert_eq!(submit["role"], "member");
    assert_eq!(submit["team"], "vision");
    assert_eq!(submit["target"], format!("job/{id}"));
    assert_eq!(submit["outcome"], "ok");
    assert!(submit["peer"].as_str().is_some_and(|p| p.starts_with("127.0.0.1:")), "{submit}");
    let refusal = rows.iter().find(|r| r["action"] == "team.set").expect("refusal audited");
    assert!(refusal["outcome"].as_str().is_some_and(|o| o.starts_with("denied:")), "{refusal}");
    let verified: Value = s.get("/v1/audit/verify").send().await.expect("send").json().await.expect("json");
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["rows"].as_u64(), Some(rows.len() as u64));
}

#[tokio::test]
async fn members_see_only_their_teams_events_and_gpu_holders() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let events: Vec<Value> = crate::json_of(s.as_(&a, reqwest::Method::GET, "/v1/events")).await;
    assert!(events.is_empty(), "cluster events (token creation) are not a member's: {events:?}");
    let all: Vec<Value> = s.get("/v1/events").send().await.expect("send").json().await.expect("json");
    assert!(all.iter().any(|e| e["kind"] == "token.created"));
}

#[tokio::test]
async fn a_member_of_another_team_cannot_read_cancel_or_join_a_gang() {
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    let body = json!({"command": ["torchrun", "train.py"], "gpus": 1, "replicas": 2});
    let gang = s.submit_as(&a, body).await["id"].as_i64().expect("id");
    let workers = s.store.workers(gang).expect("workers");
    assert_eq!(workers.len(), 2);
    assert!(workers.iter().all(|w| w.team == "vision"), "workers belong to the gang's team");
    for id in std::iter::once(gang).chain(workers.iter().map(|w| w.id)) {
        let read = s.as_(&b, reqwest::Method::GET, &format!("/v1/jobs/{id}"));
        assert_eq!(status(read).await, StatusCode::NOT_FOUND, "job {id}");
        let cancel = s.as_(&b, reqwest::Method::POST, &format!("/v1/jobs/{id}/cancel"));
        assert_eq!(status(cancel).await, StatusCode::NOT_FOUND, "job {id}");
    }
    let listed: Vec<Value> = crate::json_of(s.as_(&b, reqwest::Method::GET, "/v1/jobs")).await;
    assert!(listed.is_empty(), "bob sees {listed:?}");
    // There is no way to name a gang to join: a submission that tries is refused, and one that
    // declares the rendezvous variables is refused too.
    for forged in [
        json!({"command": ["true"], "gpus": 1, "gang": {"id": gang, "replicas": 2, "rank": 1}}),
        json!({"command": ["true"], "gpus": 1, "gang_id": gang}),
        json!({"command": ["true"], "gpus": 1, "env": {"MASTER_ADDR": "evil"}}),
        json!({"command": ["true"], "gpus": 1, "env": {"RANK": "0"}}),
        json!({"command": ["true"], "gpus": 0, "replicas": 2}),
        json!({"command": ["true"], "gpus": 1, "replicas": 100_000}),
    ] {
        let submit = s.as_(&b, reqwest::Method::POST, "/v1/jobs").json(&forged);
        let code = status(submit).await;
        assert!(code.is_client_error(), "{forged} got {code}");
    }
    assert!(s.store.workers(gang).expect("workers").iter().all(|w| w.state == JobState::Pending));
    // Alice reads her gang with its workers.
    let detail: Value = crate::json_of(s.as_(&a, reqwest::Method::GET, &format!("/v1/jobs/{gang}"))).await;
    assert_eq!(detail["job"]["gang"]["replicas"], 2);
    assert_eq!(detail["workers"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_node_registering_again_keeps_the_attempts_it_still_runs_and_loses_the_rest() {
    let s = TestServer::start().await;
    let a = gantry_server::create_node_credential(&*s.store, "node-a").expect("credential");
    assert_eq!(s.register(&a, "node-a", &["GPU-A0", "GPU-A1"]).await.status(), StatusCode::OK);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let job = s.post("/v1/jobs").json(&json!({"command": ["sleep", "60"], "gpus": 1})).send().await;
        ids.push(job.expect("send").json::<Value>().await.expect("json")["id"].as_i64().expect("id"));
    }
    for _ in 0..50 {
        let placed = ids
            .iter()
            .all(|id| s.store.job(*id).expect("job").is_some_and(|j| j.state == JobState::Scheduled));
        if placed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The agent restarted: it still runs the first job, not the second (and names a job that
    // does not exist, and a wrong attempt of nothing).
    let again = json!({"node_id": "node-a", "hostname": "a", "cpu_milli": 8000, "memory_mib": 65536,
        "gpus": [{"uuid": "GPU-A0", "index": 0, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920},
                 {"uuid": "GPU-A1", "index": 1, "model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920}],
        "attempts": [{"job_id": ids[0], "attempt": 1}, {"job_id": 999, "attempt": 1}]});
    let resp =
        s.as_(&a, reqwest::Method::POST, "/v1/agent/register").json(&again).send().await.expect("send");
    assert_eq!(resp.status(), StatusCode::OK);
    let epoch = resp.json::<Value>().await.expect("json")["epoch"].as_u64();
    let kept = s.store.job(ids[0]).expect("job").expect("job");
    assert_eq!((kept.state, kept.attempt, kept.epoch), (JobState::Scheduled, 1, epoch), "{kept:?}");
    let lost = s.store.job(ids[1]).expect("job").expect("job");
    assert!(lost.epoch != epoch, "{lost:?}");
    assert!(lost.state == JobState::Pending || lost.attempt == 2, "the unclaimed job was requeued: {lost:?}");
    let held = s.store.allocations(true).expect("allocations");
    assert!(held.iter().any(|a| a.job_id == ids[0]), "the kept job keeps its GPU");
}

#[tokio::test]
async fn a_bad_gpu_range_gets_422_with_a_sentence_and_elastic_jobs_stay_within_their_team() {
    let s = TestServer::start().await;
    let node = gantry_server::create_node_credential(&*s.store, "node-a").expect("credential");
    assert_eq!(s.register(&node, "node-a", &["GPU-A0", "GPU-A1"]).await.status(), StatusCode::OK);
    let alice = s.token_for("alice", Role::Member, &["vision"]);
    let bob = s.token_for("bob", Role::Member, &["nlp"]);
    for (body, says) in [
        (json!({"command": ["true"], "gpus": 3, "gpus_max": 2}), "must not exceed the maximum"),
        (json!({"command": ["true"], "gpus": 0, "gpus_max": 2}), "at least 1 GPU"),
        (json!({"command": ["true"], "gpus": 1, "gpus_max": 8}), "the most GPUs on one node is 2"),
        (
            json!({"command": ["true"], "gpus_max": 8, "wait_for_capacity": true, "gpu_memory_mib": 10}),
            "slice",
        ),
        (json!({"command": ["true"], "gpus": 1, "gpus_max": 2, "replicas": 2}), "elastic gangs"),
        (json!({"command": ["true"], "gpus": 1, "gpus_max": 1000}), "at most 64"),
    ] {
        let resp = s.as_(&alice, reqwest::Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let error = crate::api::error_of(resp).await;
        assert!(error.contains("gpus_max") || error.contains("elastic"), "{body}: {error}");
        assert!(error.contains(says), "{body}: {error}");
    }
    let id = s.submit_as(&alice, json!({"command": ["true"], "gpus": 1, "gpus_max": 2})).await["id"]
        .as_i64()
        .expect("id");
    let detail: Value = crate::json_of(s.as_(&alice, reqwest::Method::GET, &format!("/v1/jobs/{id}"))).await;
    assert_eq!(
        (detail["job"]["request"]["gpus"].as_u64(), detail["job"]["request"]["gpus_max"].as_u64()),
        (Some(1), Some(2))
    );
    let read = s.as_(&bob, reqwest::Method::GET, &format!("/v1/jobs/{id}"));
    assert_eq!(status(read).await, StatusCode::NOT_FOUND, "another team's elastic job is invisible");
    let listed: Vec<Value> = crate::json_of(s.as_(&bob, reqwest::Method::GET, "/v1/jobs")).await;
    assert!(listed.is_empty(), "bob sees {listed:?}");
    let theirs = json!({"command": ["true"], "gpus": 1, "gpus_max": 2, "team": "vision"});
    let submit = s.as_(&bob, reqwest::Method::POST, "/v1/jobs").json(&theirs);
    assert_eq!(status(submit).await, StatusCode::FORBIDDEN, "no elastic job in another team's name");
}

/// `--array` work is bounded by what it asks for, not by the unique indices: before, one 1 MiB
/// body repeating `0-9999` parsed 10,000 indices per part on the async runtime (minutes of CPU),
/// stalling every request until the node's heartbeats timed out and its jobs were requeued.
#[tokio::test]
async fn an_array_of_repeated_overlapping_ranges_is_refused_before_it_costs_anything() {
    let s = TestServer::start().await;
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    let viewer = s.token_for("vic", Role::Viewer, &["nlp"]);
    let array = ["0-9999"; 2].join(",");
    for token in [&b, &viewer] {
        let resp = s
            .as_(token, reqwest::Method::POST, "/v1/jobs")
            .json(&json!({"command": ["true"], "array": array}))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = resp.json().await.expect("json");
        assert!(body["error"].as_str().is_some_and(|e| e.contains("more than 10000")), "{body}");
    }
    let jobs: Vec<Value> = crate::json_of(s.as_(&b, reqwest::Method::GET, "/v1/jobs")).await;
    assert!(jobs.is_empty(), "nothing was queued");
}

/// Before, `until=-2^63` overflowed computing the default `since` (a panic: the connection
/// dropped) and `since=-2^63&until=2^63-1` overflowed in the store (a 500).
#[tokio::test]
async fn usage_periods_outside_the_calendar_get_422_not_a_panic() {
    let s = TestServer::start().await;
    let b = s.token_for("bob", Role::Member, &["nlp"]);
    for query in
        ["until=-9223372036854775808", "since=-9223372036854775808&until=9223372036854775807", "since=-1"]
    {
        let resp =
            s.as_(&b, reqwest::Method::GET, &format!("/v1/usage?{query}")).send().await.expect("answered");
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{query}");
    }
    let ok = s
        .as_(&b, reqwest::Method::GET, "/v1/usage?since=0&until=253402300799999")
        .send()
        .await
        .expect("send");
    assert_eq!(ok.status(), StatusCode::OK);
}

/// A token made through the API (as `gantry token create` does); returns its secret.
async fn mint(s: &TestServer, body: serde_json::Value) -> String {
    let resp = s.post("/v1/tokens").json(&body).send().await.expect("send");
    assert!(resp.status().is_success(), "{body}: {}", resp.status());
    resp.json::<serde_json::Value>().await.expect("json")["token"].as_str().expect("secret").to_owned()
}

#[tokio::test]
async fn a_viewers_token_made_for_a_team_without_a_user_is_not_the_members_user_and_sees_no_env_values() {
    let s = TestServer::start().await;
    let member = mint(&s, json!({"team": "alpha"})).await;
    let viewer = mint(&s, json!({"team": "alpha", "role": "viewer"})).await;
    let body = json!({"command": ["sleep", "60"], "env": {"SECRET": "hunter2"}, "wait_for_capacity": true});
    let id = s.submit_as(&member, body).await["id"].as_i64().expect("id");
    let seen: serde_json::Value =
        crate::json_of(s.as_(&viewer, reqwest::Method::GET, &format!("/v1/jobs/{id}"))).await;
    assert_ne!(seen["job"]["env"]["SECRET"], "hunter2", "the viewer is not the submitter: {seen}");
    // The member is still a member: the viewer's token did not re-role it.
    let again = s.submit_as(&member, json!({"command": ["true"], "wait_for_capacity": true})).await;
    assert!(again["id"].as_i64().is_some(), "{again}");
    let users: Vec<serde_json::Value> = crate::json_of(s.get("/v1/users")).await;
    let role_of = |name: &str| users.iter().find(|u| u["name"] == name).map(|u| u["role"].clone());
    assert_eq!(role_of("alpha"), Some(json!("member")), "{users:?}");
    assert_eq!(role_of("alpha-viewer"), Some(json!("viewer")), "{users:?}");
}

#[tokio::test]
async fn a_write_re_reads_its_callers_token_so_one_revoked_or_demoted_behind_the_cache_changes_nothing() {
    use gantry_store::{Actor, AuditEntry, Change};
    let s = TestServer::start().await;
    let a = s.token_for("alice", Role::Member, &["vision"]);
    let id = s.submit_as(&a, json!({"command": ["true"]})).await["id"].as_i64().expect("id");
    let me: Value = crate::json_of(s.as_(&a, reqwest::Method::GET, "/v1/whoami")).await;
    let token_id = me["token_id"].as_i64().expect("id");
    let system = |action: &str| AuditEntry {
        actor: Actor { name: "other-replica".into(), role: "admin".into(), team: None, peer: None },
        action: action.into(),
        target: String::new(),
        at: gantry_server::now_ms(),
        credential: None,
    };
    // Another replica (here: the store directly) takes alice out of team vision; this server's
    // token cache has not heard of it. Reads it serves from the cached token; writes it refuses.
    let demoted = user("alice", Role::Member, &["nlp"]);
    s.store.apply(Change::SetUser(demoted), system("user.set")).expect("set user");
    let cancel =
        s.as_(&a, reqwest::Method::POST, &format!("/v1/jobs/{id}/cancel")).send().await.expect("send");
    assert_eq!(cancel.status(), StatusCode::FORBIDDEN);
    assert!(cancel.text().await.expect("text").contains("lost team vision"));
    let job = s.store.job(id).expect("read").expect("job");
    assert_eq!(job.state, JobState::Pending, "nothing was changed");
    // Then revokes the token: the next write says so, and the audit log records the refusal.
    s.store.apply(Change::RevokeToken(token_id), system("token.revoke")).expect("revoke");
    let body = json!({"command": ["true"], "team": "vision"});
    let submit = s.as_(&a, reqwest::Method::POST, "/v1/jobs").json(&body).send().await.expect("send");
    assert_eq!(submit.status(), StatusCode::FORBIDDEN);
    assert!(submit.text().await.expect("text").contains("was revoked"));
    let jobs = s.store.jobs(&gantry_store::JobFilter::default()).expect("jobs");
    assert_eq!(jobs.len(), 1, "no job was added: {jobs:?}");
}

#[tokio::test]
async fn a_nodes_word_for_why_a_job_ended_is_cut_to_a_sentence() {
    let s = TestServer::start().await;
    let credential = gantry_server::create_node_credential(&*s.store, "n1").expect("credential");
    let resp = s.register(&credential, "n1", &["GPU-1"]).await;
    let epoch = resp.json::<Value>().await.expect("json")["epoch"].as_u64().expect("epoch");
    let id = s.submit_as(&s.token, json!({"command": ["true"], "gpus": 1})).await["id"].as_i64().expect("id");
    let beat = |jobs: Value| {
        let hb = json!({"node_id": "n1", "epoch": epoch, "gpus": [], "jobs": jobs});
        s.as_(&credential, reqwest::Method::POST, "/v1/agent/heartbeat").json(&hb).send()
    };
    for _ in 0..50 {
        let answer: Value = beat(json!([])).await.expect("send").json().await.expect("json");
        if answer["assignments"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A forged (or broken) agent reports the end with 34 KB of someone's response body.
    let body = "<html>".repeat(6000);
    let ended = json!([{"job_id": id, "attempt": 1, "exit": {"exit_code": 1, "reason": body}}]);
    assert_eq!(beat(ended).await.expect("send").status(), StatusCode::OK);
    let job = s.store.job(id).expect("read").expect("job");
    assert_eq!(job.state, JobState::Failed);
    let reason = job.reason.unwrap_or_default();
    assert!(reason.chars().count() <= 300, "{} characters kept", reason.chars().count());
    let events: Vec<Value> = crate::json_of(s.get(&format!("/v1/events?job={id}"))).await;
    assert!(
        events.iter().all(|e| e["message"].as_str().is_none_or(|m| m.chars().count() <= 400)),
        "{events:?}"
    );
}
