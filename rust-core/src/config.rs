//! The engine configuration the host passes as JSON to `php_worker_engine_new`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::{Error, Result};

/// Engine-wide settings. Changing any of them needs a new engine.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// PHP threads serving classic (one script per request) requests.
    pub num_threads: usize,
    /// Worker pools; the pool id of `workers[i]` is `i + 1` (0 is the classic pool).
    #[serde(default)]
    pub workers: Vec<WorkerConfig>,
    /// On shutdown, how long running scripts may take before they are stopped the way a
    /// timeout stops them.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// php.ini overrides, applied after php.ini files.
    #[serde(default)]
    pub php_ini: BTreeMap<String, String>,
    /// Requests that may wait for a thread before new ones are refused.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
}

/// A worker script and the threads that keep it booted.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// For logs.
    pub name: String,
    /// Absolute path of the worker script.
    pub file: String,
    /// Threads running the script.
    pub num: usize,
    /// Requests a script serves before it is restarted; 0 for no limit.
    #[serde(default)]
    pub max_requests: u64,
    /// Extra `$_SERVER`/getenv() values, for the boot and every request.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Longest wait between two boot attempts of a script that keeps failing before
    /// it reaches frankenphp_handle_request(). Waits start at 100 ms and double.
    #[serde(default = "default_boot_backoff_ms")]
    pub max_boot_backoff_ms: u64,
}

fn default_queue_capacity() -> usize {
    4096
}

fn default_shutdown_grace_ms() -> u64 {
    30_000
}

fn default_boot_backoff_ms() -> u64 {
    5_000
}

impl Config {
    pub fn from_json(json: &[u8]) -> Result<Config> {
        let config: Config = serde_json::from_slice(json).map_err(|e| Error::Config(e.to_string()))?;
        if config.num_threads == 0 {
            return Err(Error::Config("num_threads must be at least 1".into()));
        }
        if config.queue_capacity == 0 {
            return Err(Error::Config("queue_capacity must be at least 1".into()));
        }
        for w in &config.workers {
            if w.num == 0 {
                return Err(Error::Config(format!("worker {}: num must be at least 1", w.name)));
            }
            if !w.file.starts_with('/') || w.file.contains('\0') {
                return Err(Error::Config(format!("worker {}: file must be an absolute path", w.name)));
            }
        }
        config.ini_entries()?;
        Ok(config)
    }

    /// The `php_ini` map in the "key=value\n" form of `sapi_module.ini_entries`.
    pub fn ini_entries(&self) -> Result<String> {
        let mut out = String::new();
        for (key, value) in &self.php_ini {
            let bad_key = key.is_empty() || key.contains(['=', '\n', '\r', '\0', '[', ']']);
            if bad_key || value.contains(['\n', '\r', '\0']) {
                return Err(Error::Config(format!("php_ini entry {key:?} = {value:?} is not a valid ini line")));
            }
            out.push_str(key);
            out.push('=');
            out.push_str(value);
            out.push('\n');
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_and_renders_ini() {
        let c = Config::from_json(br#"{"num_threads":3,"php_ini":{"memory_limit":"256M","a.b":"x y"}}"#).unwrap();
        assert_eq!(c.num_threads, 3);
        assert_eq!(c.queue_capacity, 4096);
        assert_eq!(c.ini_entries().unwrap(), "a.b=x y\nmemory_limit=256M\n");
    }

    #[test]
    fn reads_workers() {
        let c = Config::from_json(
            br#"{"num_threads":1,"workers":[{"name":"w","file":"/a/w.php","num":2,"env":[["A","1"]]}]}"#,
        )
        .unwrap();
        let w = &c.workers[0];
        assert_eq!((w.num, w.max_requests, w.max_boot_backoff_ms), (2, 0, 5000));
        assert_eq!(w.env, vec![("A".to_owned(), "1".to_owned())]);
        assert_eq!(c.shutdown_grace_ms, 30_000);
        assert!(Config::from_json(br#"{"num_threads":1,"workers":[{"name":"w","file":"rel.php","num":1}]}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"workers":[{"name":"w","file":"/a.php","num":0}]}"#).is_err());
    }

    #[test]
    fn refuses_bad_settings() {
        assert!(Config::from_json(br#"{"num_threads":0}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"unknown":1}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"php_ini":{"a=b":"c"}}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"php_ini":{"a":"b\nc=d"}}"#).is_err());
        assert!(Config::from_json(b"not json").is_err());
    }
}
