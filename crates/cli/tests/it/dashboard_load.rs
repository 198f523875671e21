//! The dashboard's start when its scripts cannot be fetched: a request cut off (Chromium aborts
//! every request in flight when an interface or address comes or goes, as on a node whose jobs
//! get network namespaces) must not leave a page of nothing but its header. Chromium's own
//! request blocking (DevTools `Network.setBlockedURLs`) makes one module fail to load.

use std::time::Duration;

use serde_json::json;

use crate::browser::Browser;
use crate::harness::Cluster;

const WAIT: Duration = Duration::from_secs(60);
const FORM: &str = "!document.getElementById('login').hidden";

fn blocked(browser: &Browser, urls: &[&str]) {
    browser.cdp("Network.enable", json!({}));
    browser.cdp("Network.setBlockedURLs", json!({ "urls": urls }));
}

#[test]
fn in_a_browser_a_module_that_failed_to_load_is_fetched_again_by_a_reload_and_the_page_starts() {
    let cluster = Cluster::start(&[]);
    let Some(browser) = Browser::start(cluster.ca_spki().as_deref()) else { return };
    let url = cluster.url();
    blocked(&browser, &["*/dashboard/api.js"]);
    browser.goto(&format!("{url}/#/jobs"));
    // The failed load is counted before the reload a second later.
    browser.wait_for(
        "the failed load to be counted",
        "sessionStorage.getItem('gantry.boot-reloads') === '1'",
        WAIT,
    );
    assert!(browser.try_wait_for(FORM, Duration::ZERO).is_none(), "no sign-in form without the modules");
    blocked(&browser, &[]);
    browser.wait_for("the sign-in form after the reload", FORM, WAIT);
    let count = browser.js("return sessionStorage.getItem('gantry.boot-reloads');", json!([]));
    assert!(count.is_null(), "a page that started forgets its reloads: {count}");
}

#[test]
fn in_a_browser_scripts_that_never_load_end_in_a_sentence_after_three_reloads() {
    let cluster = Cluster::start(&[]);
    let Some(browser) = Browser::start(cluster.ca_spki().as_deref()) else { return };
    blocked(&browser, &["*/dashboard/view.js"]);
    browser.goto(&format!("{}/#/jobs", cluster.url()));
    let said = browser.wait_for(
        "the sentence",
        "document.querySelector('#main .error') && document.querySelector('#main .error').textContent",
        WAIT,
    );
    assert_eq!(
        said.as_str(),
        Some("The dashboard could not load its scripts from the server; reload the page to try again.")
    );
    let count = browser.js("return sessionStorage.getItem('gantry.boot-reloads');", json!([]));
    assert!(count.is_null(), "the count starts again at the next reload: {count}");
    assert!(browser.try_wait_for(FORM, Duration::ZERO).is_none());
}
