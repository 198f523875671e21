//! `/healthz` and `/metrics` over HTTP.

use crate::support::{Running, quick_health};
use gantry_agent::exporter::client;
use std::time::Duration;

#[test]
fn healthz_answers_ok_once_a_collection_was_published_and_metrics_use_the_text_format() {
    let run = Running::start("T4", Duration::from_millis(50), quick_health());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = client::get(run.addr, "/healthz", Duration::from_secs(2)).expect("healthz");
        if r.status == 200 {
            assert_eq!(r.body, "ok\n");
            break;
        }
        assert_eq!(r.status, 503);
        assert!(std::time::Instant::now() < deadline, "never became healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
    let body = run.scrape();
    assert!(body.contains("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"));
    assert!(body.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
    assert_eq!(client::get(run.addr, "/nope", Duration::from_secs(2)).expect("404").status, 404);
}
