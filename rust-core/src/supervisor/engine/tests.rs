//! The engine with a real PHP: classic and worker requests, and pools changing while
//! they serve.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;
use crate::abi::types::{
    Field, PHP_WORKER_REFUSED_BOOT_FAILING, PHP_WORKER_REFUSED_STOPPED, PHP_WORKER_REQUEST_BODY_COMPLETE, PHP_WORKER_RESPONSE_DONE,
    PHP_WORKER_RESPONSE_REFUSED,
};
use crate::request::encode;
use crate::request::tests::fields;
use crate::runtime::info::ThreadState;
use crate::testing::*;

/// Engines are one per process: engine tests take turns.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());

const DISPLAY_ERRORS: &str = r#"{"php_ini":{"display_errors":"1","html_errors":"0"}}"#;

fn with_engine(config: &str, classic: usize, f: impl FnOnce(&Engine)) {
    let _turn = ENGINE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let engine = Engine::start(&EngineConfig::from_json(config.as_bytes()).unwrap(), test_host()).unwrap();
    engine.pool(CLASSIC).unwrap().resize(classic, false).unwrap();
    f(&engine);
    engine.shutdown(Duration::from_secs(5));
}

fn spec(file: &str, num: usize, extra: &str) -> WorkerSpec {
    WorkerSpec::from_json(
        format!(r#"{{"name":"w","file":"{file}","num":{num},"boot":{{"fields":[],"vars":[["FRANKENPHP_WORKER","1"]],"env_pairs":1}},"max_boot_backoff_ms":200{extra}}}"#)
            .as_bytes(),
    )
    .unwrap()
}

/// Submits a request with these fields and vars, without waiting.
fn submit(engine: &Engine, pool: PoolId, f: &[&str], vars: &[(&str, &str)], env_pairs: u32, body: &[u8]) -> usize {
    let handle = new_handle();
    let (block, spans) = encode(f, vars, body);
    let request =
        Request::new(engine.host().clone(), &block, &spans, env_pairs, body.len(), body.len() as i64, PHP_WORKER_REQUEST_BODY_COMPLETE, handle)
            .unwrap();
    engine.submit(pool, request).unwrap();
    handle
}

/// Runs a GET of `path` with `?query` in `pool` and returns its calls.
fn get(engine: &Engine, pool: PoolId, path: &str, query: &str) -> Vec<Call> {
    let uri = format!("/x?{query}");
    let mut f = fields("GET", path);
    f[Field::RequestUri as usize] = &uri;
    f[Field::QueryString as usize] = query;
    let handle = submit(engine, pool, &f, &[], 0, b"");
    wait_done(handle, path)
}

fn get_body(engine: &Engine, pool: PoolId, path: &str) -> String {
    body(&get(engine, pool, path, ""))
}

/// Whether a log line with exactly this message and fields containing `fields` came
/// within 10 s.
fn wait_event(message: &str, fields: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if EXCHANGES.logs.lock().unwrap().iter().any(|l| l.2 == message && l.3.contains(fields)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Waits until `check` holds, for up to 10 s.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn threads_of(engine: &Engine, pool: PoolId) -> Vec<usize> {
    engine.threads().iter().filter(|t| t.pool() == pool && t.state() != ThreadState::Stopping).map(|t| t.index).collect()
}

#[test]
fn runs_scripts_with_server_vars_env_body_and_status() {
    with_engine(DISPLAY_ERRORS, 2, |engine| {
        let hello = script("hello.php", "<?php header('X-Test: yes'); http_response_code(201); echo 'hello';");
        let calls = get(engine, CLASSIC, &hello, "");
        assert_eq!(calls.len(), 1, "a small response is one callback");
        assert_eq!(calls[0].status, 201);
        assert_eq!(body(&calls), "hello");
        assert!(calls[0].headers.contains(&("X-Test".into(), "yes".into())));

        let vars = script(
            "vars.php",
            "<?php echo $_SERVER['REQUEST_METHOD'], '|', $_SERVER['FOO'], '|', getenv('APP_ENV'), '|', \
             $_GET['a'], '|', file_get_contents('php://input'), '|', isset($_SERVER['PATH']) ? 'env' : 'noenv';",
        );
        let mut f = fields("POST", &vars);
        f[Field::QueryString as usize] = "a=1";
        let handle = submit(engine, CLASSIC, &f, &[("REQUEST_METHOD", "POST"), ("FOO", "bar"), ("APP_ENV", "prod")], 1, b"payload");
        assert_eq!(body(&wait_done(handle, &vars)), "POST|bar|prod|1|payload|env");

        let fatal = script("fatal.php", "<?php echo 'before '; undefined_function();");
        let calls = get(engine, CLASSIC, &fatal, "");
        assert_eq!(calls[0].status, 500);
        assert!(body(&calls).contains("Call to undefined function"), "{}", body(&calls));
        let calls = get(engine, CLASSIC, &hello, "");
        assert_eq!((calls[0].status, body(&calls).as_str()), (201, "hello"), "the thread is clean after a fatal");

        let exit = script("exit.php", "<?php echo 'a'; exit(3); echo 'b';");
        assert_eq!(get_body(engine, CLASSIC, &exit), "a");
    });
}

#[test]
fn every_response_says_which_thread_ran_the_request_and_how_long_it_waited() {
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        let slow = script("slow-first.php", "<?php usleep(300000); echo 'slow';");
        let quick = script("quick-after.php", "<?php echo 'quick';");
        let first = submit(engine, CLASSIC, &fields("GET", &slow), &[], 0, b"");
        let second = submit(engine, CLASSIC, &fields("GET", &quick), &[], 0, b"");
        let (first, second) = (wait_done(first, &slow), wait_done(second, &quick));
        let thread = engine.threads()[0].index as i32;
        assert_eq!((first[0].thread_index, second[0].thread_index), (thread, thread));
        assert!(first[0].queued_us < 250_000, "the first found its thread free: {} us", first[0].queued_us);
        assert!(second[0].queued_us >= 250_000, "the second waited for the first: {} us", second[0].queued_us);
    });
}

#[test]
fn php_errors_reach_the_log_with_their_level() {
    with_engine(r#"{"php_ini":{"log_errors":"1","display_errors":"0"}}"#, 1, |engine| {
        let s = script("log.php", "<?php error_log('custom line'); trigger_error('careful', E_USER_WARNING);");
        let handle = get(engine, CLASSIC, &s, "")[0].handle;
        let logs: Vec<_> = EXCHANGES.logs.lock().unwrap().iter().filter(|l| l.0 == handle).cloned().collect();
        let custom = logs.iter().find(|l| l.2 == "custom line").expect("error_log() is logged with its message alone");
        assert_eq!(custom.1, Level::Info as i32);
        assert_eq!(custom.3, format!(r#"{{"source":"error_log","file":"{s}","line":1}}"#));
        let warning = logs.iter().find(|l| l.2 == "careful").expect("a PHP warning is logged with its message alone");
        assert_eq!(warning.1, Level::Warn as i32);
        assert_eq!(warning.3, format!(r#"{{"php_error":"Warning","file":"{s}","line":1}}"#));
    });
}

#[test]
fn an_engine_can_stop_and_start_again_and_refuses_a_twin() {
    let s = script("one.php", "<?php echo 1;");
    with_engine("{}", 1, |engine| {
        assert!(matches!(Engine::start(&EngineConfig::from_json(b"{}").unwrap(), test_host()), Err(Error::AlreadyRunning)));
        assert_eq!(get_body(engine, CLASSIC, &s), "1");
        engine.shutdown(Duration::from_secs(5));
        let (host, handle) = recording_host();
        let (block, spans) = encode(&fields("GET", &s), &[], b"");
        let r = Request::new(host, &block, &spans, 0, 0, 0, 0, handle).unwrap();
        assert!(matches!(engine.submit(CLASSIC, r), Err(Error::Stopped)));
        assert!(calls_for(handle).is_empty(), "a refused request is left to the host");
    });
    with_engine("{}", 1, |engine| assert_eq!(get_body(engine, CLASSIC, &s), "1"));
}

#[test]
fn the_classic_pool_grows_and_shrinks_in_place() {
    let s = script("pid.php", "<?php echo 'ok';");
    with_engine("{}", 2, |engine| {
        eventually("2 threads", || threads_of(engine, CLASSIC).len() == 2);
        let before = threads_of(engine, CLASSIC);
        engine.pool(CLASSIC).unwrap().resize(5, false).unwrap();
        eventually("5 threads", || threads_of(engine, CLASSIC).len() == 5);
        assert!(before.iter().all(|i| threads_of(engine, CLASSIC).contains(i)), "growing keeps the running threads");
        engine.pool(CLASSIC).unwrap().resize(1, false).unwrap();
        eventually("1 thread", || engine.threads().len() == 1);
        assert_eq!(get_body(engine, CLASSIC, &s), "ok");
        assert!(matches!(engine.pool(CLASSIC).unwrap().restart(None, true), Err(Error::Pool(..))));
    });
}

const COUNTER: &str = "<?php $n = 0; $booted = $_SERVER['FRANKENPHP_WORKER'] ?? 'no';
    while (frankenphp_handle_request(function () use (&$n, $booted) {
        $n++; header('X-N: ' . $n);
        echo 'requests:', $n, '|', $booted, '|', $_GET['a'] ?? '-', '|', $_SERVER['FOO'] ?? '-';
    })) {}";

#[test]
fn a_worker_keeps_its_state_and_resets_the_request() {
    let w = script("counter-worker.php", COUNTER);
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        engine.create_worker_pool(7, spec(&w, 1, "")).unwrap();
        let mut f = fields("GET", &w);
        f[Field::QueryString as usize] = "a=1";
        let first = wait_done(submit(engine, 7, &f, &[("FOO", "one")], 0, b""), &w);
        assert_eq!(body(&first), "requests:1|1|1|one");
        assert!(first[0].headers.contains(&("X-N".into(), "1".into())));
        let second = get(engine, 7, &w, "");
        assert_eq!(body(&second), "requests:2|1|-|-", "$_GET and $_SERVER are the new request's");
        assert!(second[0].headers.iter().all(|(k, v)| k != "X-N" || v == "2"), "headers do not carry over");
        assert!(matches!(engine.create_worker_pool(7, spec(&w, 1, "")), Err(Error::Pool(7, _))), "ids are unique");
    });
}

#[test]
fn a_failing_request_gets_a_500_and_the_worker_restarts() {
    let w = script(
        "crashy-worker.php",
        "<?php $n = 0; while (frankenphp_handle_request(function () use (&$n) {
             $n++; if (($_GET['a'] ?? '') === 'boom') { throw new LogicException('boom'); }
             echo 'n=', $n;
         })) {}",
    );
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "n=1");
        let calls = get(engine, 1, &w, "a=boom");
        assert_eq!(calls[0].status, 500);
        assert!(body(&calls).contains("Uncaught LogicException: boom"), "{}", body(&calls));
        assert_eq!(get_body(engine, 1, &w), "n=1", "a fresh script serves the next request");
        assert!(wait_event("worker script crashed; restarting it", r#""worker":"w","thread":"php-"#), "the restart is logged with the thread");
        // A request's duration is counted just after its response left: wait for it.
        eventually("the three requests are counted", || engine.pool(1).unwrap().stats().duration.count == 3);
        let pool = engine.pool(1).unwrap().stats();
        assert_eq!((pool.crashes, pool.restarts), (1, 0), "a crash is no restart on purpose");
    });
}

#[test]
fn a_worker_that_cannot_boot_hands_its_waiting_requests_back() {
    let w = script("broken-boot-worker.php", "<?php throw new RuntimeException('no database');");
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        let calls = get(engine, 1, &w, "");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].flags, PHP_WORKER_RESPONSE_DONE | PHP_WORKER_RESPONSE_REFUSED);
        assert_eq!(calls[0].refusal, PHP_WORKER_REFUSED_BOOT_FAILING);
        assert!((100..=1000).contains(&calls[0].retry_after_ms), "the next pause: {}", calls[0].retry_after_ms);
        assert!(calls[0].headers.is_empty() && calls[0].body.is_empty(), "the host writes the answer");
        // The thread logs after it has refused: wait for the line.
        assert!(wait_event("no thread can start the worker script: the waiting requests are refused", r#""worker":"w","refused":1"#));
        assert!(wait_event("worker script failed before reaching frankenphp_handle_request(); backing off", r#""thread":"php-"#));
        assert!(engine.pool(1).unwrap().stats().crashes >= 1, "a failed boot is a crash");
    });
}

#[test]
fn max_requests_recycles_the_script() {
    let w = script("recycled-worker.php", "<?php $n = 0; while (frankenphp_handle_request(function () use (&$n) { $n++; echo $n; })) {}");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, r#","max_requests":2"#)).unwrap();
        let bodies: Vec<String> = (0..5).map(|_| get_body(engine, 1, &w)).collect();
        assert_eq!(bodies, vec!["1", "2", "1", "2", "1"]);
        let pool = engine.pool(1).unwrap().stats();
        assert_eq!((pool.restarts, pool.crashes), (2, 0));
    });
}

#[test]
fn max_memory_recycles_a_growing_script_and_counts_its_growth() {
    // Each request keeps 3 MB (a 2 MB chunk or more from the system each time).
    let w = script(
        "growing-worker.php",
        "<?php $kept = []; while (frankenphp_handle_request(function () use (&$kept) { $kept[] = str_repeat('x', 3 << 20); echo count($kept); })) {}",
    );
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, r#","max_memory":8000000"#)).unwrap();
        let counts: Vec<u32> = (0..6).map(|_| get_body(engine, 1, &w).parse().unwrap()).collect();
        // 3 MB a request: past 8 MB after the second or third request.
        assert!(counts.iter().all(|&n| n <= 3), "{counts:?}");
        let restarts = counts.windows(2).filter(|p| p[1] == 1).count() as u64;
        assert!(restarts >= 1, "{counts:?}");
        let restarted = "worker script restarted (max_memory): its PHP memory passed the limit";
        assert!(wait_event(restarted, r#""max_memory":8000000,"grew_most":"/x +"#));
        // The last request may have left the script past the limit too: its restart
        // follows the answer, and is counted once the script ends.
        eventually("the restarts are counted", || engine.pool(1).unwrap().stats().restarts >= restarts);
        std::thread::sleep(Duration::from_millis(300));
        let counted = engine.pool(1).unwrap().stats().restarts;
        assert!(counted == restarts || counted == restarts + 1, "{counted} restarts counted, {counts:?}");
        let pool = engine.pool(1).unwrap().stats();
        assert_eq!(pool.crashes, 0);
        assert_eq!(pool.memory_growth.len(), 1, "{:?}", pool.memory_growth);
        assert_eq!(pool.memory_growth[0].requests, 6);
        assert!(pool.memory_growth[0].bytes >= 18 << 20, "{:?}", pool.memory_growth);
    });
}

#[test]
fn post_max_size_is_read_at_startup() {
    with_engine(r#"{"php_ini":{"post_max_size":"3M"}}"#, 1, |engine| {
        assert_eq!(engine.post_max_size(), 3 << 20);
        assert_eq!(crate::supervisor::stats::collect(engine).post_max_size, 3 << 20);
    });
}

#[test]
fn handle_request_outside_a_worker_throws() {
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        let s = script(
            "not-a-worker.php",
            "<?php try { frankenphp_handle_request(fn () => null); } catch (RuntimeException $e) { echo $e->getMessage(); }",
        );
        assert_eq!(get_body(engine, CLASSIC, &s), "frankenphp_handle_request() called while not in worker mode");
    });
}

#[test]
fn putenv_is_per_thread_and_per_request() {
    let set = script(
        "putenv-set.php",
        "<?php putenv('PW_T=1'); putenv('PATH'); $all = getenv();
         echo getenv('PW_T'), '|', var_export(getenv('PATH'), true), '|', $all['PW_T'] ?? '-', '|',
         isset($all['PATH']) ? 'path' : 'no-path';",
    );
    let read = script("putenv-read.php", "<?php echo var_export(getenv('PW_T'), true), '|', getenv('PATH') ? 'path' : 'none';");
    let w = script(
        "putenv-worker.php",
        "<?php putenv('BOOTED=yes'); while (frankenphp_handle_request(function () { echo getenv('BOOTED'); })) {}",
    );
    with_engine("{}", 1, |engine| {
        assert_eq!(get_body(engine, CLASSIC, &set), "1|false|1|no-path");
        assert_eq!(get_body(engine, CLASSIC, &read), "false|path", "a classic request forgets its putenv()s");
        assert!(std::env::var_os("PW_T").is_none(), "the process environment is untouched");
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "yes");
        assert_eq!(get_body(engine, 1, &w), "yes", "a worker keeps its boot-time putenv()s");
    });
}

/// A worker whose answer is its code's version, read from the file when it boots.
fn versioned_worker(name: &str, version: &str) -> String {
    let w = script(name, "");
    write_version(&w, version);
    w
}

fn write_version(path: &str, version: &str) {
    std::fs::write(path, format!("<?php $v = '{version}'; while (frankenphp_handle_request(function () use ($v) {{ echo $v; }})) {{}}")).unwrap();
}

#[test]
fn a_restart_boots_new_code_beside_the_old_and_loses_no_request() {
    let w = versioned_worker("rolling.php", "v1");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 2, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "v1");
        let old = threads_of(engine, 1);
        write_version(&w, "v2");
        // Requests keep flowing while the new generation boots and the old one retires.
        let handles: Vec<usize> = (0..50)
            .map(|i| {
                if i == 10 {
                    assert_eq!(engine.pool(1).unwrap().restart(None, true).unwrap(), 2);
                }
                submit(engine, 1, &fields("GET", &w), &[], 0, b"")
            })
            .collect();
        for h in handles {
            let calls = wait_done(h, &w);
            assert_eq!(calls[0].status, 200);
            assert!(["v1", "v2"].contains(&body(&calls).as_str()));
        }
        eventually("the old generation's threads ended", || {
            engine.threads().iter().filter(|t| t.pool() == 1).all(|t| t.snapshot().generation == 2)
        });
        assert_eq!(old.len(), 2);
        eventually("2 threads of the new generation", || {
            let s = engine.pool(1).unwrap().stats();
            s.generation == 2 && s.ready == 2 && s.threads == 2
        });
        assert_eq!(get_body(engine, 1, &w), "v2", "new code is served");
    });
}

#[test]
fn a_staged_generation_waits_for_activation_or_is_discarded() {
    let w = versioned_worker("staged.php", "v1");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "v1");
        write_version(&w, "v2");
        let pool = engine.pool(1).unwrap();
        let staged = pool.restart(None, false).unwrap();
        eventually("the staged thread booted", || engine.threads().iter().any(|t| t.state() == ThreadState::Standby));
        for _ in 0..5 {
            assert_eq!(get_body(engine, 1, &w), "v1", "a staged generation takes no request");
        }
        pool.discard(staged).unwrap();
        eventually("the staged thread ended", || engine.threads().len() == 2);
        assert_eq!(get_body(engine, 1, &w), "v1", "the running generation is untouched");
        assert!(pool.activate(staged).is_err(), "a discarded generation cannot be activated");

        let staged = pool.restart(None, false).unwrap();
        pool.activate(staged).unwrap();
        eventually("v2 is served", || get_body(engine, 1, &w) == "v2");
        eventually("one worker thread is left", || engine.threads().len() == 2);
    });
}

/// The host numbers generations (every process of a cluster knows a generation by the
/// same number): a spec's generation is the one it starts, and a restart's must be newer
/// than any the pool had.
#[test]
fn generations_take_the_numbers_the_host_gives() {
    let w = versioned_worker("numbered.php", "v1");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, r#","generation":5"#)).unwrap();
        assert_eq!(engine.pool(1).unwrap().stats().generation, 5);
        assert_eq!(get_body(engine, 1, &w), "v1");
        let pool = engine.pool(1).unwrap();
        let err = pool.restart(Some(spec(&w, 1, r#","generation":5"#)), true).unwrap_err();
        assert!(err.to_string().contains("generation 5 is not newer than generation 5"), "{err}");
        assert_eq!(pool.stats().generation, 5, "a refused restart changes nothing");
        assert_eq!(pool.restart(Some(spec(&w, 1, r#","generation":9"#)), false).unwrap(), 9);
        write_version(&w, "v2");
        assert_eq!(pool.restart(None, false).unwrap(), 10, "unnumbered: the one after the last");
        assert!(pool.activate(9).is_err(), "the restart replaced staged generation 9");
        pool.activate(10).unwrap();
        eventually("v2 is served", || get_body(engine, 1, &w) == "v2");
        assert_eq!(pool.stats().generation, 10);
    });
}

#[test]
fn a_new_generation_that_cannot_boot_leaves_the_old_one_serving() {
    let w = versioned_worker("broken-deploy.php", "v1");
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "v1");
        std::fs::write(&w, "<?php throw new RuntimeException('broken deploy');").unwrap();
        engine.pool(1).unwrap().restart(None, true).unwrap();
        assert!(wait_log("broken deploy", Duration::from_secs(10)));
        // Idle past max_idle_time (autoscaling off, idle threads are still looked for):
        // the old thread is the only one serving, not an extra.
        engine.set_limits(Limits { max_threads: 0, max_idle: Duration::from_millis(100) });
        std::thread::sleep(Duration::from_millis(600));
        for _ in 0..5 {
            let calls = get(engine, 1, &w, "");
            assert_eq!((calls[0].status, body(&calls).as_str()), (200, "v1"), "the old generation keeps serving, no 503");
        }
        write_version(&w, "v3");
        eventually("the fixed code is served", || get_body(engine, 1, &w) == "v3");
        eventually("the old thread retired", || engine.pool(1).unwrap().stats().threads == 1);
    });
}

#[test]
fn a_pool_without_threads_hands_its_queue_back_on_a_php_thread() {
    let s = script("never-run.php", "<?php echo 'ran';");
    with_engine("{}", 0, |engine| {
        let handles: Vec<usize> = (0..2).map(|_| submit(engine, CLASSIC, &fields("GET", &s), &[], 0, b"")).collect();
        engine.shutdown(Duration::from_secs(5));
        for h in handles {
            let calls = wait_done(h, &s);
            assert_eq!(calls.len(), 1);
            assert_eq!((calls[0].flags, calls[0].refusal), (PHP_WORKER_RESPONSE_DONE | PHP_WORKER_RESPONSE_REFUSED, PHP_WORKER_REFUSED_STOPPED));
            assert_eq!(calls[0].thread, "php-main", "never on the host's thread that stopped the engine");
        }
    });
}

#[test]
fn a_deleted_pool_serves_what_is_queued_then_its_threads_end() {
    let w = script("slow-worker.php", "<?php while (frankenphp_handle_request(function () { usleep(100000); echo 'done'; })) {}");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(3, spec(&w, 1, "")).unwrap();
        let handles: Vec<usize> = (0..3).map(|_| submit(engine, 3, &fields("GET", &w), &[], 0, b"")).collect();
        engine.delete_pool(3).unwrap();
        for h in handles {
            assert_eq!(body(&wait_done(h, &w)), "done", "queued requests are served");
        }
        let (block, spans) = encode(&fields("GET", &w), &[], b"");
        let r = Request::new(engine.host().clone(), &block, &spans, 0, 0, 0, 0, new_handle()).unwrap();
        assert!(matches!(engine.submit(3, r), Err(Error::UnknownPool(3))));
        eventually("the worker thread ended", || engine.threads().len() == 1);
        assert!(engine.delete_pool(CLASSIC).is_err());
    });
}

#[test]
fn threads_move_between_pools_and_keep_their_php_context() {
    let w = script("mover.php", "<?php while (frankenphp_handle_request(function () { echo 'worker'; })) {}");
    let classic = script("classic.php", "<?php echo 'classic';");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        eventually("both threads are up", || engine.threads().len() == 2);
        let worker_thread = threads_of(engine, 1)[0];
        let (from, to) = (engine.pool(1).unwrap(), engine.pool(CLASSIC).unwrap());
        assert_eq!(from.hand_over(1, &to), 1);
        eventually("the worker thread serves classic scripts", || threads_of(engine, CLASSIC).contains(&worker_thread));
        assert_eq!(engine.threads().len(), 2, "no thread was created or ended");
        assert_eq!(get_body(engine, CLASSIC, &classic), "classic");
        assert_eq!(to.hand_over(2, &from), 2);
        eventually("both threads run the worker", || threads_of(engine, 1).len() == 2);
        assert_eq!(get_body(engine, 1, &w), "worker");
        assert_eq!(engine.threads().len(), 2);
    });
}

#[test]
fn a_staged_generation_keeps_its_threads_when_threads_move_away() {
    let w = versioned_worker("staged-mover.php", "v1");
    with_engine("{}", 1, |engine| {
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        assert_eq!(get_body(engine, 1, &w), "v1");
        let (pool, classic) = (engine.pool(1).unwrap(), engine.pool(CLASSIC).unwrap());
        write_version(&w, "v2");
        let staged = pool.restart(None, false).unwrap();
        eventually("the staged thread booted", || engine.threads().iter().any(|t| t.state() == ThreadState::Standby));
        // A staged thread is no thread to spare: activating a generation without its
        // threads would retire the old ones for nothing.
        assert_eq!(pool.hand_over(1, &classic), 1);
        // The move is the thread's to make, at its next command: until it has, the old
        // generation's thread still takes the pool's requests.
        eventually("the old generation's thread moved to the classic pool", || threads_of(engine, CLASSIC).len() == 2);
        pool.activate(staged).unwrap();
        assert_eq!(get_body(engine, 1, &w), "v2");
    });
}

#[test]
fn stats_list_threads_and_pools() {
    let w = script("stats-worker.php", "<?php while (frankenphp_handle_request(function () { echo 'x'; })) {}");
    with_engine("{}", 2, |engine| {
        engine.create_worker_pool(4, spec(&w, 1, "")).unwrap();
        get_body(engine, 4, &w);
        // Counted just after the response left.
        eventually("the request is counted", || engine.pool(4).unwrap().stats().duration.count == 1);
        let stats = crate::supervisor::stats::collect(engine);
        assert_eq!(stats.threads.len(), 3);
        let worker: Vec<_> = stats.threads.iter().filter(|t| t.pool == 4).collect();
        assert_eq!(worker.len(), 1);
        assert_eq!((worker[0].worker.as_deref(), worker[0].requests, worker[0].generation), (Some("w"), 1, 1));
        assert!(worker[0].memory > 0, "memory is recorded after each request");
        assert!(stats.threads.iter().filter(|t| t.pool == CLASSIC).all(|t| t.worker.is_none()));
        let pool = stats.pools.iter().find(|p| p.id == 4).unwrap();
        assert_eq!((pool.threads, pool.ready, pool.failing, pool.generation), (1, 1, 0, 1));
        assert_eq!((pool.duration.count, pool.wait.count, pool.base, pool.queued), (1, 1, 1, 0));
        assert!(pool.duration.sum > 0.0 && pool.wait.sum > 0.0);
        let json = serde_json::to_string(&stats).unwrap();
        assert!(json.contains(r#""state":"ready""#) && json.contains(r#""name":"php-"#), "{json}");
    });
}

/// Submits `n` GETs of `path` at once; returns their handles.
fn submit_many(engine: &Engine, pool: PoolId, path: &str, n: usize) -> Vec<usize> {
    (0..n).map(|_| submit(engine, pool, &fields("GET", path), &[], 0, b"")).collect()
}

/// The most threads `pool` had while `handles` were served.
fn peak_threads_while(engine: &Engine, pool: PoolId, handles: &[usize]) -> usize {
    let mut peak = 0;
    let done = || EXCHANGES.done_handles(handles);
    while !done() {
        peak = peak.max(engine.pool(pool).unwrap().load().threads);
        std::thread::sleep(Duration::from_millis(5));
    }
    peak
}

#[test]
fn autoscaling_adds_threads_while_requests_wait_and_removes_idle_ones() {
    let slow = script("slow.php", "<?php usleep(200000); echo 'slept';");
    with_engine("{}", 1, |engine| {
        engine.set_limits(Limits { max_threads: 5, max_idle: Duration::from_millis(300) });
        let handles = submit_many(engine, CLASSIC, &slow, 12);
        let peak = peak_threads_while(engine, CLASSIC, &handles);
        assert!(peak > 1, "sleeping requests that wait get more threads");
        assert!(peak <= 5, "never more than max_threads: {peak}");
        for h in handles {
            assert_eq!(body(&wait_done(h, "slow")), "slept");
        }
        assert!(wait_event("added PHP threads: requests are waiting", r#""worker":"","added":"#));
        eventually("idle extra threads end", || engine.pool(CLASSIC).unwrap().load().threads == 1);
        assert!(wait_event("removed idle PHP threads", r#""worker":"","removed":"#));
        let stats = crate::supervisor::stats::collect(engine);
        assert_eq!(stats.max_threads, 5);
        let classic = stats.pools.iter().find(|p| p.id == CLASSIC).unwrap();
        assert!(classic.wait.count == 12 && classic.wait.sum > 0.2, "requests waited: {:?}", classic.wait);
    });
}

#[test]
fn a_worker_grows_within_its_own_max_threads_and_the_engine_limit() {
    let w = script("slow-worker.php", "<?php while (frankenphp_handle_request(function () { usleep(150000); echo 'w'; })) {}");
    with_engine("{}", 1, |engine| {
        engine.set_limits(Limits { max_threads: 10, max_idle: Duration::from_millis(300) });
        engine.create_worker_pool(1, spec(&w, 1, r#","max_threads":3"#)).unwrap();
        assert_eq!(get_body(engine, 1, &w), "w");
        let handles = submit_many(engine, 1, &w, 12);
        let peak = peak_threads_while(engine, 1, &handles);
        assert_eq!(peak, 3, "the worker's own max_threads bounds it");
        eventually("the worker returns to num", || engine.pool(1).unwrap().load().threads == 1);
        assert_eq!(engine.pool(CLASSIC).unwrap().load().threads, 1, "the classic pool had nothing waiting");
    });
}

#[test]
fn without_autoscaling_pools_keep_their_size() {
    let slow = script("slow-fixed.php", "<?php usleep(100000);");
    with_engine("{}", 1, |engine| {
        let handles = submit_many(engine, CLASSIC, &slow, 4);
        assert_eq!(peak_threads_while(engine, CLASSIC, &handles), 1);
    });
}

#[test]
fn a_restart_keeps_the_capacity_autoscaling_gave_the_worker() {
    let w = script("scaled-worker.php", "<?php while (frankenphp_handle_request(function () { usleep(100000); echo 'w'; })) {}");
    with_engine("{}", 1, |engine| {
        engine.set_limits(Limits { max_threads: 10, max_idle: Duration::from_secs(30) });
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        let handles = submit_many(engine, 1, &w, 8);
        let peak = peak_threads_while(engine, 1, &handles);
        assert!(peak > 1);
        let before = engine.pool(1).unwrap().load().threads;
        engine.pool(1).unwrap().restart(None, true).unwrap();
        eventually("the new generation took over", || {
            let s = engine.pool(1).unwrap().stats();
            s.generation == 2 && s.ready == before && s.threads == before
        });
        assert!(engine.pool(1).unwrap().stats().restarts >= before as u64);
    });
}

/// Threads of `pool` in generation `generation`, ended ones excluded.
fn threads_of_generation(engine: &Engine, pool: PoolId, generation: u32) -> usize {
    engine.threads().iter().filter(|t| t.pool() == pool && t.state() != ThreadState::Stopping && t.snapshot().generation == generation).count()
}

#[test]
fn idle_old_threads_keep_serving_while_the_new_generation_cannot_boot() {
    let w = versioned_worker("scaled-broken-deploy.php", "v1");
    with_engine(DISPLAY_ERRORS, 1, |engine| {
        engine.set_limits(Limits { max_threads: 10, max_idle: Duration::from_secs(30) });
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        let pool = engine.pool(1).unwrap();
        // Two threads above num, as autoscaling adds them under load.
        assert_eq!(pool.grow(2).unwrap(), 2);
        eventually("3 threads booted", || pool.stats().ready == 3);
        std::fs::write(&w, "<?php throw new RuntimeException('broken scaled deploy');").unwrap();
        pool.restart(None, true).unwrap();
        assert!(wait_log("broken scaled deploy", Duration::from_secs(10)));
        // Now the old threads are idle extras several times over.
        engine.set_limits(Limits { max_threads: 10, max_idle: Duration::from_millis(100) });
        std::thread::sleep(Duration::from_millis(1000));
        for _ in 0..5 {
            let calls = get(engine, 1, &w, "");
            assert_eq!((calls[0].status, calls[0].refusal, body(&calls).as_str()), (200, 0, "v1"), "the old generation keeps serving");
        }
        // Idle extras still end: the old generation down to num, each with one of the
        // new threads it stood in for.
        eventually("one old thread and one new one are left", || {
            threads_of_generation(engine, 1, 1) == 1 && threads_of_generation(engine, 1, 2) == 1 && pool.stats().threads == 2
        });
        assert_eq!(get_body(engine, 1, &w), "v1");
        write_version(&w, "v3");
        eventually("the fixed code is served", || get_body(engine, 1, &w) == "v3");
        eventually("the old thread retired", || pool.stats().threads == 1 && threads_of_generation(engine, 1, 1) == 0);
    });
}

#[test]
fn autoscaling_adds_no_thread_to_a_worker_that_cannot_boot() {
    let w = script("never-boots.php", "<?php throw new RuntimeException('no database');");
    with_engine("{}", 1, |engine| {
        engine.set_limits(Limits { max_threads: 10, max_idle: Duration::from_secs(30) });
        engine.create_worker_pool(1, spec(&w, 1, "")).unwrap();
        let mut peak = 0;
        for _ in 0..30 {
            submit_many(engine, 1, &w, 2);
            peak = peak.max(engine.pool(1).unwrap().load().threads);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(peak, 1, "threads that would fail to boot too are not added");
    });
}

/// Sends tasks to the task worker "w" one after another through the engine's router,
/// each waited for, until one is refused: how many were served, and the refusal.
/// Panics on a task left unanswered.
fn send_tasks_until_refused(engine: &Engine, payload: &[u8]) -> (usize, String) {
    let router = TaskRoutes(Arc::downgrade(&engine.pools));
    let mut answered = 0;
    loop {
        let (tx, rx) = crossbeam_channel::unbounded();
        if let Err(why) = router.submit_task("w", &TaskChain::default(), payload, TaskReply::new(0, tx)) {
            return (answered, why);
        }
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok((_, Ok(_))) => answered += 1,
            Ok((_, Err(e))) => return (answered, e.message().to_string()),
            Err(_) => panic!("task {answered} was never answered"),
        }
    }
}

#[test]
fn a_task_sent_as_its_worker_drains_is_served_or_refused_never_left_queued() {
    let w = script("length-tasks.php", "<?php while (php_worker_handle_task(fn (string $p) => (string) strlen($p))) {}");
    // Large: copying it into its task takes long enough for the drain to come meanwhile.
    let payload = vec![b'x'; 64 << 20];
    with_engine("{}", 1, |engine| {
        for round in 0..8u64 {
            engine.create_worker_pool(5, spec(&w, 2, r#","kind":"task""#)).unwrap();
            eventually("the task worker booted", || engine.pool(5).unwrap().stats().ready == 2);
            // Held, as Engine::shutdown holds the pools it drains: a task queued after
            // the drain would stay where no thread takes it.
            let held = engine.pool(5).unwrap();
            let (served, refusal) = std::thread::scope(|s| {
                let sender = s.spawn(|| send_tasks_until_refused(engine, &payload));
                std::thread::sleep(Duration::from_millis(300 + 40 * round));
                engine.delete_pool(5).unwrap();
                sender.join().unwrap()
            });
            assert!(!refusal.contains("dropped"), "round {round}, after {served} tasks: refused in words, not lost: {refusal}");
            drop(held);
            eventually("the task worker's threads ended", || engine.threads().len() == 1);
        }
    });
}
