// Errors come back as Result, naming what was wrong; a writer dropped without close() abandons
// its trace instead of leaking it.
use tapdiff::{Config, TraceWriter};

fn temp(name: &str) -> String {
    std::env::temp_dir().join(format!("tapdiff_rust_{}_{name}.h5", std::process::id())).display().to_string()
}

#[test]
fn an_unwritable_path_is_an_error_naming_it() {
    let err = TraceWriter::create("/nonexistent-dir/run.h5", &Config::external("test", 1)).err().expect("an error");
    assert_eq!(err.status, "trace error");
    assert!(err.message.contains("/nonexistent-dir/run.h5"), "{err}");
}

#[test]
fn a_row_count_that_does_not_match_the_values_is_refused() {
    let path = temp("rows");
    let mut trace = TraceWriter::create(&path, &Config::external("test", 1)).unwrap();
    let err = trace.record("attn_q", 0, 0, 2, &[4], &[0.0; 4]).err().expect("an error");
    assert_eq!(err.status, "invalid argument");
    assert!(err.message.contains("attn_q"), "{err}");
    trace.record("attn_q", 0, 0, 1, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    trace.end_step().unwrap();
    trace.close().unwrap();
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_name_with_a_nul_byte_is_refused() {
    let path = temp("nul");
    let mut trace = TraceWriter::create(&path, &Config::external("test", 1)).unwrap();
    let err = trace.record("attn\0q", 0, 0, 1, &[1], &[0.0]).err().expect("an error");
    assert!(err.message.contains("NUL"), "{err}");
    drop(trace);  // abandoned: the file stays, marked incomplete
    assert!(std::path::Path::new(&path).exists());
    std::fs::remove_file(path).unwrap();
}
