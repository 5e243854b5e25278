// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package brotli

import (
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestCaddyfileTakesAQualityFrom0To11: `br`, `br 11`; a quality out of range, or a
// second argument, is refused.
func TestCaddyfileTakesAQualityFrom0To11(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
		want int
	}{
		{"br", true, defaultBrotliQuality},
		{"br 11", true, 11},
		{"br 0", true, 0},
		{"br 12", false, 0},
		{"br fast", false, 0},
		{"br 4 5", false, 0},
	} {
		var b Brotli
		err := b.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.line))
		if err == nil {
			err = b.Validate()
		}
		if (err == nil) != c.ok {
			t.Errorf("%q: error %v", c.line, err)
			continue
		}
		if c.ok && b.quality() != c.want {
			t.Errorf("%q: quality %d, want %d", c.line, b.quality(), c.want)
		}
	}
}
