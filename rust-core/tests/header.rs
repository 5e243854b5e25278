//! include/php_worker.h must match what cbindgen generates from src/ffi.rs.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_src(dir.join("src/ffi.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen runs")
        .write(&mut generated);
    let path = dir.join("include/php_worker.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write header");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale; regenerate it with UPDATE_HEADER=1 cargo test -p php-worker-core header_is_current",
        path.display()
    );
}
