//! The one string layout that crosses the ABI and the C shim: every string in one
//! block, each followed by a NUL (so C uses it in place), and a list of u32
//! (offset, length) spans, one per string. Name/value pairs are two consecutive spans.
//!
//! Go writes requests in this layout (go-module/cgi.go), [`crate::request::Request`]
//! checks and reads them, and the shim registers `$_SERVER` and the environment from it
//! (`pw_shim_vars` in csrc/shim.h).

use crate::error::{Error, Result};

/// Strings in the layout, owned.
#[derive(Default, Clone, Debug)]
pub struct Strings {
    bytes: Vec<u8>,
    spans: Vec<u32>,
}

impl Strings {
    /// Appends a string. Strings with a NUL cannot be represented and must be
    /// filtered by the caller.
    pub fn push(&mut self, s: &[u8]) {
        debug_assert!(!s.contains(&0));
        self.spans.push(self.bytes.len() as u32);
        self.spans.push(s.len() as u32);
        self.bytes.extend_from_slice(s);
        self.bytes.push(0);
    }

    /// Name/value pairs; a pair with an empty name or a NUL anywhere is skipped (no
    /// variable can have it).
    pub fn from_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: impl IntoIterator<Item = (K, V)>) -> Strings {
        let mut strings = Strings::default();
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            if name.is_empty() || name.contains(&0) || value.contains(&0) {
                continue;
            }
            strings.push(name);
            strings.push(value);
        }
        strings
    }

    /// The environment of this process as pairs.
    pub fn from_process_env() -> Strings {
        use std::os::unix::ffi::OsStrExt;
        Strings::from_pairs(std::env::vars_os().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn spans(&self) -> &[u32] {
        &self.spans
    }

    /// Appends raw bytes after the strings (a request's read-ahead body).
    pub fn append_raw(&mut self, raw: &[u8]) {
        self.bytes.extend_from_slice(raw);
    }

    /// The strings as pairs: (name, value) of pair `i`.
    pub fn pair(&self, i: usize) -> (&[u8], &[u8]) {
        (get(&self.bytes, &self.spans, 2 * i), get(&self.bytes, &self.spans, 2 * i + 1))
    }

    pub fn pair_count(&self) -> usize {
        self.spans.len() / 4
    }

    /// The last value of `name`, reading the strings as pairs.
    pub fn value_of(&self, name: &[u8]) -> Option<&[u8]> {
        (0..self.pair_count()).rev().map(|i| self.pair(i)).find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn into_parts(self) -> (Vec<u8>, Vec<u32>) {
        (self.bytes, self.spans)
    }
}

/// Checks that every span lies before `end` and that a NUL follows each string.
pub fn check(bytes: &[u8], spans: &[u32], end: usize) -> Result<()> {
    if spans.len() % 2 != 0 || end > bytes.len() {
        return Err(Error::InvalidRequest("span count"));
    }
    for span in spans.chunks_exact(2) {
        let (start, len) = (span[0] as usize, span[1] as usize);
        let last = start.checked_add(len).ok_or(Error::InvalidRequest("span overflow"))?;
        if last >= end || bytes[last] != 0 {
            return Err(Error::InvalidRequest("span out of bounds or not NUL-terminated"));
        }
    }
    Ok(())
}

/// String `i` of checked strings, without its NUL.
pub fn get<'a>(bytes: &'a [u8], spans: &[u32], i: usize) -> &'a [u8] {
    let (start, len) = (spans[2 * i] as usize, spans[2 * i + 1] as usize);
    &bytes[start..start + len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_skip_what_no_variable_can_hold() {
        let s = Strings::from_pairs([("A", "1"), ("", "x"), ("B\0", "y"), ("C", "3"), ("A", "2")]);
        assert_eq!(s.pair_count(), 3);
        assert_eq!(s.bytes(), b"A\01\0C\03\0A\02\0");
        assert_eq!(s.value_of(b"A"), Some(&b"2"[..]), "the last value wins");
        assert_eq!(s.value_of(b"Z"), None);
        check(s.bytes(), s.spans(), s.bytes().len()).unwrap();
    }

    #[test]
    fn check_refuses_spans_out_of_bounds_or_without_nul() {
        let mut s = Strings::default();
        s.push(b"GET");
        s.append_raw(b"body");
        let (bytes, mut spans) = s.into_parts();
        check(&bytes, &spans, 4).unwrap();
        assert!(check(&bytes, &spans, 3).is_err(), "the NUL must come before the body");
        spans[1] = 2;
        assert!(check(&bytes, &spans, 4).is_err(), "\"GE\" is followed by T, not NUL");
        spans[1] = u32::MAX;
        assert!(check(&bytes, &spans, 4).is_err());
        assert!(check(&bytes, &spans[..1], 4).is_err(), "odd span count");
    }
}
