//! Property-based fuzzing of the trace readers: any file — valid header with garbage rows, or
//! garbage altogether — gives rows or a `file:line` error, never a panic. Bounded by
//! `GANTRY_FUZZ_CASES` (default 64).

use gantry_sim::{read_nodes, read_pods};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("GANTRY_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

fn cell() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        Just(String::new()),
        Just("\"a,b\"".to_owned()),
        Just("A100".to_owned()),
        "[^\n]{0,12}",
    ]
}

fn rows(columns: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::collection::vec(cell(), 0..=columns + 1), 0..12)
        .prop_map(|rows| rows.iter().map(|r| r.join(",")).collect::<Vec<_>>().join("\n"))
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(f.path(), text).expect("write");
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn node_lists_with_garbage_rows_are_read_or_refused(body in rows(5)) {
        let f = file(&format!("sn,cpu_milli,memory_mib,gpu,model\n{body}\n"));
        if let Err(e) = read_nodes(f.path()) {
            prop_assert!(e.to_string().contains(&f.path().display().to_string()), "{e}");
        }
    }

    #[test]
    fn pod_lists_with_garbage_rows_are_read_or_refused(body in rows(7)) {
        let f = file(&format!("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time\n{body}\n"));
        let _ = read_pods(f.path());
    }

    #[test]
    fn arbitrary_bytes_are_refused_or_read_without_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), &bytes).expect("write");
        let _ = read_nodes(f.path());
        let _ = read_pods(f.path());
    }
}
