//! The JSON the host passes to create an engine and its worker pools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Engine-wide settings: changing any of them needs a new engine.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// php.ini overrides, applied after php.ini files. A list value gives the key one
    /// line per value, in order: PHP loads every `extension` and `zend_extension` line.
    #[serde(default)]
    pub php_ini: BTreeMap<String, IniValue>,
    /// Defaults under php.ini (PHP's `ini_defaults`): what php.ini files and `php_ini`
    /// may still change, such as the extension_dir of a portable binary.
    #[serde(default)]
    pub ini_defaults: BTreeMap<String, String>,
    /// Requests after which a PHP thread starts a fresh PHP context, classic and worker
    /// threads alike (a worker's script ends first); 0 for never.
    #[serde(default)]
    pub thread_max_requests: u64,
    /// Requests' last response calls go to the completion queue (php_worker_completions_take)
    /// instead of the `respond` callback.
    #[serde(default)]
    pub completions: bool,
    /// The engine answers over the process's wire to the Caddy process
    /// (php_worker_wire_open()) instead of through the callbacks: a child process's.
    #[serde(default)]
    pub wire: bool,
}

/// A `php_ini` value: one, or one per line for the keys PHP reads every line of.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum IniValue {
    One(String),
    Lines(Vec<String>),
}

impl IniValue {
    fn values(&self) -> &[String] {
        match self {
            IniValue::One(v) => std::slice::from_ref(v),
            IniValue::Lines(v) => v,
        }
    }
}

/// What a worker script does on its threads.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WorkerKind {
    /// It serves HTTP requests through frankenphp_handle_request().
    #[default]
    Http,
    /// It runs tasks other PHP threads send it (php_worker_task()) through
    /// php_worker_handle_task().
    Task,
    /// It runs a loop of its own and takes no requests: each thread runs the script,
    /// and runs it again when it ends, until it is told to stop.
    Background,
}

impl WorkerKind {
    /// The kind's name in logs and the thread list.
    pub fn name(self) -> &'static str {
        match self {
            WorkerKind::Http => "http",
            WorkerKind::Task => "task",
            WorkerKind::Background => "background",
        }
    }
}

/// A worker script and the threads that keep it booted.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// For logs and the thread list; task workers are found by it (php_worker_task()).
    pub name: String,
    /// What the script does; a pool keeps its kind across restarts.
    #[serde(default)]
    pub kind: WorkerKind,
    /// Absolute path of the worker script.
    pub file: String,
    /// Threads running the script.
    pub num: usize,
    /// Requests a script serves before it is restarted; 0 for no limit.
    #[serde(default)]
    pub max_requests: u64,
    /// PHP memory (`memory_get_usage(true)`) past which a script is restarted after its
    /// request, as max_requests restarts it; 0 for no limit.
    #[serde(default)]
    pub max_memory: u64,
    /// The request the script sees while it boots and between requests, as the host
    /// wrote it. Absent: a bare GET of the file, without `$_SERVER` values.
    #[serde(default)]
    pub boot: BootRequest,
    /// The worker's env without placeholders, sent once for the pool: `$_SERVER` and
    /// getenv() of its boot and of every request it serves have these pairs, after the
    /// request's own (env values with placeholders come with each request instead).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Most threads autoscaling may give the worker; 0 for no limit of its own (the
    /// engine's limit still applies). Never below `num`.
    #[serde(default)]
    pub max_threads: usize,
    /// Longest wait between two boot attempts of a script that keeps failing before
    /// it reaches frankenphp_handle_request(). Waits start at 100 ms and double.
    #[serde(default = "default_boot_backoff_ms")]
    pub max_boot_backoff_ms: u64,
    /// How long a background script told to stop (a restart, a removal, the engine's
    /// shutdown) may take before it is stopped the way a timeout stops it.
    #[serde(default = "default_stop_timeout_ms")]
    pub stop_timeout_ms: u64,
    /// A scheduled job's `$argv`, the script's path first; empty for workers.
    #[serde(default)]
    pub argv: Vec<String>,
    /// The number of the generation this spec starts, chosen by the host so that every
    /// process of a cluster knows a generation by the same number; 0: the one after the
    /// pool's last (1 for a new pool). A restart's must be above every generation the
    /// pool had.
    #[serde(default)]
    pub generation: u32,
}

/// A request as the host writes every request: the fixed fields in
/// [`Field`](crate::abi::types::Field) order, then the `$_SERVER` pairs, the last
/// `env_pairs` of which also answer getenv().
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BootRequest {
    pub fields: Vec<String>,
    pub vars: Vec<(String, String)>,
    pub env_pairs: usize,
}

impl BootRequest {
    fn check(&self) -> std::result::Result<(), &'static str> {
        if !self.fields.is_empty() && self.fields.len() != crate::abi::types::Field::Count as usize {
            return Err("boot.fields must hold every fixed field");
        }
        if self.env_pairs > self.vars.len() {
            return Err("boot.env_pairs counts more pairs than boot.vars holds");
        }
        let strings = self.fields.iter().chain(self.vars.iter().flat_map(|(k, v)| [k, v]));
        if strings.into_iter().any(|s| s.contains('\0')) {
            return Err("boot strings cannot hold NUL");
        }
        Ok(())
    }
}

fn default_boot_backoff_ms() -> u64 {
    5_000
}

fn default_stop_timeout_ms() -> u64 {
    30_000
}

impl EngineConfig {
    pub fn from_json(json: &[u8]) -> Result<EngineConfig> {
        let config: EngineConfig = serde_json::from_slice(json).map_err(|e| Error::Config(e.to_string()))?;
        config.ini_entries()?;
        config.ini_defaults()?;
        Ok(config)
    }

    /// The `php_ini` map in the "key=value\n" form of `sapi_module.ini_entries`, a line
    /// per value.
    pub fn ini_entries(&self) -> Result<String> {
        ini_lines(self.php_ini.iter().flat_map(|(k, v)| v.values().iter().map(move |v| (k, v))))
    }

    /// `ini_defaults` as "key=value\n" lines.
    pub fn ini_defaults(&self) -> Result<String> {
        ini_lines(self.ini_defaults.iter())
    }
}

fn ini_lines<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Result<String> {
    let mut out = String::new();
    for (key, value) in pairs {
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

impl WorkerSpec {
    pub fn from_json(json: &[u8]) -> Result<WorkerSpec> {
        let spec: WorkerSpec = serde_json::from_slice(json).map_err(|e| Error::Config(e.to_string()))?;
        if spec.num == 0 {
            return Err(Error::Config(format!("worker {}: num must be at least 1", spec.name)));
        }
        if spec.max_threads != 0 && spec.max_threads < spec.num {
            return Err(Error::Config(format!(
                "worker {}: max_threads ({}) must be at least num ({})",
                spec.name, spec.max_threads, spec.num
            )));
        }
        if !spec.file.starts_with('/') || spec.file.contains('\0') {
            return Err(Error::Config(format!("worker {}: file must be an absolute path", spec.name)));
        }
        spec.boot.check().map_err(|e| Error::Config(format!("worker {}: {e}", spec.name)))?;
        if spec.argv.iter().any(|a| a.contains('\0')) {
            return Err(Error::Config(format!("worker {}: argv must not hold NUL", spec.name)));
        }
        // The rule go-module's checkEnv applies: getenv() and putenv() end a name at '='.
        if spec.env.iter().any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0')) {
            return Err(Error::Config(format!("worker {}: env names must not be empty, nor hold '=' or NUL, nor values NUL", spec.name)));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_engine_json_and_renders_ini() {
        let c = EngineConfig::from_json(br#"{"php_ini":{"memory_limit":"256M","a.b":"x y"}}"#).unwrap();
        assert_eq!(c.ini_entries().unwrap(), "a.b=x y\nmemory_limit=256M\n");
        assert!(EngineConfig::from_json(br#"{"queue_capacity":4096}"#).is_err(), "an unknown key is refused");
        assert!(EngineConfig::from_json(br#"{"unknown":1}"#).is_err());
        assert!(EngineConfig::from_json(br#"{"php_ini":{"a=b":"c"}}"#).is_err());
        assert!(EngineConfig::from_json(br#"{"php_ini":{"a":"b\nc=d"}}"#).is_err());
        assert!(EngineConfig::from_json(b"not json").is_err());
    }

    #[test]
    fn renders_one_line_per_extension_in_order() {
        let c = EngineConfig::from_json(
            br#"{"php_ini":{"extension":["b.so","a.so"],"zend_extension":"x.so"},"ini_defaults":{"extension_dir":"/opt/x"}}"#,
        )
        .unwrap();
        assert_eq!(c.ini_entries().unwrap(), "extension=b.so\nextension=a.so\nzend_extension=x.so\n");
        assert_eq!(c.ini_defaults().unwrap(), "extension_dir=/opt/x\n");
        assert!(EngineConfig::from_json(br#"{"php_ini":{"extension":["a\nb"]}}"#).is_err());
        assert!(EngineConfig::from_json(br#"{"ini_defaults":{"a":"b\nc"}}"#).is_err());
        assert!(EngineConfig::from_json(br#"{"php_ini":{"extension":[1]}}"#).is_err());
    }

    #[test]
    fn reads_worker_specs() {
        let w = WorkerSpec::from_json(br#"{"name":"w","file":"/a/w.php","num":2,"boot":{"fields":[],"vars":[["A","1"]],"env_pairs":1}}"#)
            .unwrap();
        assert_eq!((w.num, w.max_requests, w.max_boot_backoff_ms), (2, 0, 5000));
        assert_eq!((w.boot.vars.clone(), w.boot.env_pairs), (vec![("A".to_owned(), "1".to_owned())], 1));
        let boot = |b: &str| WorkerSpec::from_json(format!(r#"{{"name":"w","file":"/a.php","num":1,"boot":{b}}}"#).as_bytes());
        assert!(boot(r#"{"fields":["GET"],"vars":[],"env_pairs":0}"#).is_err(), "every field or none");
        assert!(boot(r#"{"fields":[],"vars":[],"env_pairs":1}"#).is_err());
        assert!(boot(r#"{"fields":[],"vars":[["A","x\u0000y"]],"env_pairs":0}"#).is_err());
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"rel.php","num":1}"#).is_err());
        // go-module's checkEnv rule: a name holds no '=' (getenv() would never find it).
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":1,"env":[["A=B","1"]]}"#).is_err());
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":1,"env":[["A","x=y"]]}"#).is_ok());
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":0}"#).is_err());
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":1,"x":1}"#).is_err());
        assert_eq!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":2,"max_threads":8}"#).unwrap().max_threads, 8);
        assert!(WorkerSpec::from_json(br#"{"name":"w","file":"/a.php","num":2,"max_threads":1}"#).is_err());
        assert_eq!((w.kind, w.stop_timeout_ms), (WorkerKind::Http, 30_000));
        let b = WorkerSpec::from_json(br#"{"name":"b","file":"/b.php","num":1,"kind":"background","stop_timeout_ms":500}"#).unwrap();
        assert_eq!((b.kind, b.stop_timeout_ms), (WorkerKind::Background, 500));
        assert!(WorkerSpec::from_json(br#"{"name":"b","file":"/b.php","num":1,"kind":"cron"}"#).is_err());
    }
}
