// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import "testing"

func TestCanonicalHeaderNames(t *testing.T) {
	headerNames.m.Store(nil) // "first" is per process: start from an empty cache
	for _, tc := range []struct{ in, want string }{
		{"content-type", "Content-Type"},
		{"X-Custom-Thing", "X-Custom-Thing"},
		{"x_underscore", "X_underscore"},
		{"Bad Name", ""},
		{"", ""},
		{"X-Ctl\x01", ""},
		{"Caf\xc3\xa9", ""},
	} {
		got, first := canonicalName([]byte(tc.in))
		if got != tc.want || !first {
			t.Errorf("canonicalName(%q) = %q, %v; want %q, true", tc.in, got, first, tc.want)
		}
		if again, first := canonicalName([]byte(tc.in)); again != tc.want || first {
			t.Errorf("canonicalName(%q) again = %q, %v; want %q from the cache", tc.in, again, first, tc.want)
		}
	}
}
