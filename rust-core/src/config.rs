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
    /// php.ini overrides, applied after php.ini files.
    #[serde(default)]
    pub php_ini: BTreeMap<String, String>,
    /// Requests that may wait for a thread before new ones are refused.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
}

fn default_queue_capacity() -> usize {
    4096
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
    fn refuses_bad_settings() {
        assert!(Config::from_json(br#"{"num_threads":0}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"unknown":1}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"php_ini":{"a=b":"c"}}"#).is_err());
        assert!(Config::from_json(br#"{"num_threads":1,"php_ini":{"a":"b\nc=d"}}"#).is_err());
        assert!(Config::from_json(b"not json").is_err());
    }
}
