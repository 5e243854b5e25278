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
        assert_eq!(s.bytes(), b"A\x001\x00C\x003\x00A\x002\x00");
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

/// Property tests of the codec: whatever the host hands over is either refused or read
/// inside its bounds, and what the encoder wrote reads back unchanged.
#[cfg(test)]
mod proptests {
    use super::*;
    use crate::abi::types::{Field, PHP_WORKER_REQUEST_BODY_COMPLETE};
    use crate::request::{Request, encode};
    use crate::testing::recording_host;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const FIELDS: [Field; Field::Count as usize] = [
        Field::Method,
        Field::RequestUri,
        Field::QueryString,
        Field::ContentType,
        Field::ScriptFilename,
        Field::PathTranslated,
        Field::Cookie,
        Field::Authorization,
        Field::Protocol,
    ];

    /// A string the layout can hold: any bytes but NUL.
    fn no_nul() -> impl Strategy<Value = Vec<u8>> {
        vec(1u8..=255, 0..24)
    }

    /// Span values that land inside small blocks, on their edges, and far outside them.
    fn span_value() -> impl Strategy<Value = u32> {
        prop_oneof![
            6 => 0u32..48,
            1 => Just(u32::MAX),
            1 => Just(u32::MAX - 1),
            1 => Just(1u32 << 31),
            1 => any::<u32>(),
        ]
    }

    /// Bytes with many NULs, so arbitrary spans often end on one.
    fn block_bytes() -> impl Strategy<Value = Vec<u8>> {
        vec(prop_oneof![1 => Just(0u8), 1 => any::<u8>()], 0..48)
    }

    /// What check must accept, written independently of it.
    fn valid(bytes: &[u8], spans: &[u32], end: usize) -> bool {
        spans.len() % 2 == 0
            && end <= bytes.len()
            && spans.chunks_exact(2).all(|s| {
                let last = u64::from(s[0]) + u64::from(s[1]);
                last < end as u64 && bytes[last as usize] == 0
            })
    }

    /// Strings 0..n of checked strings, each with the byte after it.
    fn read_all<'a>(bytes: &'a [u8], spans: &[u32]) -> Vec<(&'a [u8], u8)> {
        (0..spans.len() / 2)
            .map(|i| {
                let s = get(bytes, spans, i);
                let after = spans[2 * i] as usize + s.len();
                (s, bytes[after])
            })
            .collect()
    }

    proptest! {
        /// Any bytes, spans and end: check refuses them, or every string lies before
        /// `end` with a NUL after it (and get never panics).
        #[test]
        fn proptest_arbitrary_spans_are_refused_or_read_in_bounds(
            bytes in block_bytes(),
            spans in vec(span_value(), 0..8),
        ) {
            // Every end around the block, so the boundary cases come up.
            for end in 0..=bytes.len() + 2 {
                let accepted = check(&bytes, &spans, end).is_ok();
                prop_assert_eq!(accepted, valid(&bytes, &spans, end), "end {}", end);
                if accepted {
                    for (i, (s, after)) in read_all(&bytes, &spans).into_iter().enumerate() {
                        prop_assert_eq!(after, 0, "string {} is not NUL-terminated", i);
                        prop_assert!(spans[2 * i] as usize + s.len() < end);
                    }
                }
            }
        }

        /// Strings pushed one by one read back unchanged, whatever raw bytes follow
        /// them; the end may not cut the last NUL off.
        #[test]
        fn proptest_pushed_strings_round_trip(strings in vec(no_nul(), 0..16), body in vec(any::<u8>(), 0..32)) {
            let mut s = Strings::default();
            for x in &strings {
                s.push(x);
            }
            let end = s.bytes().len();
            s.append_raw(&body);
            prop_assert_eq!(s.spans().len(), 2 * strings.len());
            prop_assert!(check(s.bytes(), s.spans(), end).is_ok());
            prop_assert!(check(s.bytes(), s.spans(), s.bytes().len()).is_ok());
            for (i, x) in strings.iter().enumerate() {
                prop_assert_eq!(get(s.bytes(), s.spans(), i), &x[..]);
            }
            if !strings.is_empty() {
                prop_assert!(check(s.bytes(), s.spans(), end - 1).is_err(), "the last NUL is cut off");
            }
            prop_assert!(check(s.bytes(), s.spans(), s.bytes().len() + 1).is_err());
        }

        /// An encoded block with one span or one byte changed is refused or read in
        /// bounds.
        #[test]
        fn proptest_corrupted_encodings_are_refused_or_read_in_bounds(
            strings in vec(no_nul(), 1..10),
            at in any::<prop::sample::Index>(),
            span in span_value(),
            byte in any::<u8>(),
            corrupt_byte in any::<bool>(),
        ) {
            let mut s = Strings::default();
            for x in &strings {
                s.push(x);
            }
            let (mut bytes, mut spans) = s.into_parts();
            if corrupt_byte {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            } else {
                let i = at.index(spans.len());
                spans[i] = span;
            }
            let end = bytes.len();
            let accepted = check(&bytes, &spans, end).is_ok();
            prop_assert_eq!(accepted, valid(&bytes, &spans, end));
            if accepted {
                for (_, after) in read_all(&bytes, &spans) {
                    prop_assert_eq!(after, 0);
                }
            }
        }

        /// Pairs keep their order; those no variable can hold (empty name, NUL) are
        /// skipped; value_of finds the last value.
        #[test]
        fn proptest_pairs_round_trip(pairs in vec((vec(prop_oneof![Just(0u8), Just(b'A'), Just(b'B'), any::<u8>()], 0..3),
                                                  vec(prop_oneof![Just(0u8), any::<u8>()], 0..6)), 0..12)) {
            let s = Strings::from_pairs(pairs.iter().map(|(k, v)| (k, v)));
            let kept: Vec<_> = pairs.iter().filter(|(k, v)| !k.is_empty() && !k.contains(&0) && !v.contains(&0)).collect();
            prop_assert_eq!(s.pair_count(), kept.len());
            prop_assert!(check(s.bytes(), s.spans(), s.bytes().len()).is_ok());
            for (i, (k, v)) in kept.iter().enumerate() {
                prop_assert_eq!(s.pair(i), (&k[..], &v[..]));
            }
            for (k, _) in &kept {
                let last = kept.iter().rev().find(|(n, _)| n == k).map(|(_, v)| &v[..]);
                prop_assert_eq!(s.value_of(k), last);
            }
        }

        /// The request decoder built on check: arbitrary spans and lengths are refused
        /// or accepted without a panic, and what is accepted reads in bounds.
        #[test]
        fn proptest_request_decoder_refuses_or_reads(
            bytes in block_bytes(),
            spans in vec(span_value(), 0..32),
            env_pairs in 0u32..4,
            body_len in 0usize..56,
        ) {
            let (host, h) = recording_host();
            if let Ok(r) = Request::new(host, &bytes, &spans, env_pairs, body_len, -1, 0, h) {
                prop_assert!(spans.len() >= 2 * FIELDS.len());
                prop_assert!(body_len <= bytes.len());
                prop_assert!(valid(&bytes, &spans, bytes.len() - body_len));
                for f in FIELDS {
                    let _ = r.field(f);
                    let _ = r.proto_num();
                }
                let (_, pairs) = r.var_spans();
                prop_assert!(r.env_pairs() <= pairs);
                r.for_each_env(|_, _| {});
                let _ = r.env_value(b"A");
                prop_assert_eq!(r.block().len(), bytes.len() - body_len);
                r.disown();
            }
        }

        /// What encode wrote, Request::new reads back: every field, every pair, the
        /// environment (the last env_pairs pairs, the last value winning) and the body.
        #[test]
        fn proptest_request_decoder_round_trips_encode(
            fields in vec("[^\0]{0,8}", FIELDS.len()),
            vars in vec(("[A-C]{1,2}", "[^\0]{0,8}"), 0..8),
            env_at in any::<prop::sample::Index>(),
            body in vec(any::<u8>(), 0..32),
            complete in any::<bool>(),
        ) {
            let field_refs: Vec<&str> = fields.iter().map(String::as_str).collect();
            let var_refs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let (block, spans) = encode(&field_refs, &var_refs, &body);
            let env_pairs = env_at.index(vars.len() + 1);
            let flags = if complete { PHP_WORKER_REQUEST_BODY_COMPLETE } else { 0 };
            let (host, h) = recording_host();
            let r = Request::new(host, &block, &spans, env_pairs as u32, body.len(), body.len() as i64, flags, h);
            prop_assert!(r.is_ok(), "encode's output refused: {:?}", r.err());
            let r = r.unwrap();
            for (f, want) in FIELDS.iter().zip(&fields) {
                prop_assert_eq!(r.field(*f), want.as_bytes());
            }
            prop_assert_eq!(r.var_spans().1, vars.len());
            prop_assert_eq!(r.env_pairs(), env_pairs);
            let env = &vars[vars.len() - env_pairs..];
            let mut seen = Vec::new();
            r.for_each_env(|n, v| seen.push((n.to_vec(), v.to_vec())));
            let want: Vec<_> = env.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
            prop_assert_eq!(seen, want);
            for name in ["A", "B", "C", "AB", "Z"] {
                let last = env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes());
                prop_assert_eq!(r.env_value(name.as_bytes()), last);
            }
            prop_assert_eq!(r.block(), &block[..block.len() - body.len()]);
            r.disown();
        }
    }
}
