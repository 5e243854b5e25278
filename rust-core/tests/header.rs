//! The generated C headers must match what cbindgen generates from the Rust sources:
//! include/php_worker.h (the public ABI) and csrc/pw_seam.h (the C shim's seam).
//! Regenerate both with: UPDATE_HEADER=1 cargo test -p php-worker-core --test header
//!
//! The PHP function handlers are the one list cbindgen cannot write (Rust declares them
//! `safe fn`, which it skips): csrc/shim.h and src/php/module.rs must name the same ones.

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
    check("cbindgen.toml", &["src/abi/types.rs", "src/abi/exports.rs"], "include/php_worker.h");
}

#[test]
fn seam_header_is_current() {
    check(
        "cbindgen-seam.toml",
        &["src/php/sys.rs", "src/php/module.rs", "src/request/sapi.rs", "src/runtime/worker.rs", "src/runtime/env.rs", "src/runtime/opcache.rs", "src/store/php.rs"],
        "csrc/pw_seam.h",
    );
}

/// The pw_php_* handlers csrc/shim.h declares, with PW_STORE_DECLARE's expanded.
fn handlers_in_shim_h(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut store_ops = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("void pw_php_##scope##_") {
            store_ops.push(rest.split('(').next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("void pw_php_") {
            assert!(
                rest.ends_with("(zend_execute_data *execute_data, zval *return_value);"),
                "a PHP handler's signature in shim.h: {line}"
            );
            names.push(format!("pw_php_{}", rest.split('(').next().unwrap()));
        }
    }
    for line in text.lines() {
        if let Some(scope) = line.trim().strip_prefix("PW_STORE_DECLARE(").and_then(|r| r.strip_suffix(")")) {
            if scope != "scope" {
                names.extend(store_ops.iter().map(|op| format!("pw_php_{scope}_{op}")));
            }
        }
    }
    names.sort();
    names
}

/// The pw_php_* handlers src/php/module.rs declares for Rust.
fn handlers_in_module_rs(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("safe fn pw_php_"))
        .map(|rest| {
            assert!(
                rest.ends_with("(execute_data: &mut ExecuteData, return_value: &mut Zval);"),
                "a PHP handler's signature in module.rs: {rest}"
            );
            format!("pw_php_{}", rest.split('(').next().unwrap())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn php_handlers_are_declared_alike_in_c_and_rust() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim = handlers_in_shim_h(&std::fs::read_to_string(dir.join("csrc/shim.h")).unwrap());
    let module = handlers_in_module_rs(&std::fs::read_to_string(dir.join("src/php/module.rs")).unwrap());
    assert!(shim.len() >= 20, "shim.h's handlers were all read: {shim:?}");
    assert_eq!(shim, module, "csrc/shim.h and src/php/module.rs declare different PHP handlers");
}
