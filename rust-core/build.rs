//! Compiles the C shim (csrc/) against the PHP headers and tells rustc where libphp is.
//!
//! PHP is found through `PHP_CONFIG` (a php-config path), as for ext-php-rs; xcaddy.sh and
//! tests/run.sh set it to the cached ZTS build from scripts/build-php.sh.

use std::env;
use std::process::Command;

fn php_config(arg: &str) -> String {
    let bin = env::var("PHP_CONFIG").unwrap_or_else(|_| "php-config".to_owned());
    let out = Command::new(&bin)
        .arg(arg)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} {arg}: {e}; set PHP_CONFIG (see scripts/build-php.sh)"));
    assert!(out.status.success(), "{bin} {arg} failed");
    String::from_utf8(out.stdout).expect("php-config prints UTF-8").trim().to_owned()
}

/// How the linked PHP was built, in words: thread safety, how the embed SAPI is linked,
/// what else changes its behaviour, and the build's directory name (scripts/build-php.sh
/// names it by version and a hash of its flags and patches).
fn php_build(prefix: &str) -> String {
    let options = php_config("--configure-options");
    let has = |flag: &str| options.split_whitespace().any(|o| o == flag);
    let mut words = vec![if has("--enable-zts") { "ZTS" } else { "NTS" }];
    words.push(if has("--enable-embed=static") { "static embed SAPI" } else { "shared embed SAPI" });
    if has("--enable-debug") {
        words.push("debug");
    }
    if has("--enable-address-sanitizer") {
        words.push("ASan");
    }
    let dir = prefix.rsplit('/').next().unwrap_or(prefix);
    format!("{}, build {dir}", words.join(", "))
}

fn main() {
    println!("cargo:rerun-if-env-changed=PHP_CONFIG");
    println!("cargo:rerun-if-changed=csrc");

    let mut build = cc::Build::new();
    // Every .c file of csrc/ (shim.h lists what runs in each).
    let mut files: Vec<_> = std::fs::read_dir("csrc")
        .expect("csrc/ is readable")
        .map(|entry| entry.expect("csrc/ is readable").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    files.sort();
    for file in files {
        build.file(file);
    }
    // pw_seam.h declares both sides of the seam as Rust sees them: a definition or call
    // that does not match must not build.
    build
        .warnings(true)
        .extra_warnings(true)
        .flag("-Wno-unused-parameter")
        .flag("-Werror=implicit-function-declaration")
        .flag("-Werror=incompatible-pointer-types")
        // As PHP's own thread-safe build compiles (with -pthread): some of its structs
        // have fields only under _REENTRANT (php_basic_globals' mblen_state), and the
        // shim must see them laid out as PHP does.
        .define("_REENTRANT", None);
    for include in php_config("--includes").split_whitespace() {
        build.flag(include);
    }
    build.compile("php_worker_shim");

    println!("cargo:rustc-env=PHP_WORKER_PHP_VERSION={}", php_config("--version"));
    let prefix = php_config("--prefix");
    println!("cargo:rustc-env=PHP_WORKER_PHP_BUILD={}", php_build(&prefix));
    println!("cargo:rustc-link-search=native={prefix}/lib");
    // libphp.a (ext-php-rs links it) needs the libraries its extensions use: the test
    // binaries link them here, as the host's link line does for the final binary.
    for flag in php_config("--libs").split_whitespace() {
        if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        } else if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        }
    }
}
