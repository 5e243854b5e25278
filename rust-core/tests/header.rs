//! The generated C headers must match what cbindgen generates from the Rust sources:
//! include/php_worker.h (the public ABI) and csrc/pw_seam.h (the C shim's seam).
//! Regenerate both with: UPDATE_HEADER=1 cargo test -p php-worker-core --test header

use std::path::Path;

fn check(config: &str, sources: &[&str], header: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join(config)).expect("cbindgen config");
    let mut builder = cbindgen::Builder::new().with_config(config);
    for src in sources {
        builder = builder.with_src(dir.join(src));
    }
    let mut generated = Vec::new();
    builder.generate().expect("cbindgen runs").write(&mut generated);
    let path = dir.join(header);
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write header");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale; regenerate it with UPDATE_HEADER=1 cargo test -p php-worker-core --test header",
        path.display()
    );
}

#[test]
fn header_is_current() {
    check("cbindgen.toml", &["src/abi/types.rs", "src/exports.rs"], "include/php_worker.h");
}

#[test]
fn seam_header_is_current() {
    check(
        "cbindgen-seam.toml",
        &["src/php/sys.rs", "src/php/module.rs", "src/host.rs", "src/request/sapi.rs", "src/runtime/worker.rs", "src/runtime/background.rs", "src/runtime/task.rs", "src/runtime/env.rs", "src/runtime/opcache.rs", "src/runtime/sample.rs", "src/runtime/store.rs"],
        "csrc/pw_seam.h",
    );
}
