// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package brotli is the `br` encoder of Caddy's encode handler, in pure Go.
package brotli

import (
	"fmt"
	"strconv"

	"github.com/andybalholm/brotli"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/encode"
)

func init() {
	caddy.RegisterModule(Brotli{})
}

// Brotli is the `br` encoding for Caddy's encode handler, in pure Go (no C library),
// so that `encode zstd br gzip`, as FrankenPHP's and Octane's Caddyfiles write it, loads:
//
//	encode br [<quality>]
type Brotli struct {
	// The quality, 0 (fastest) to 11 (smallest). Default: 4, a level fast enough for
	// responses compressed as they are sent.
	Quality *int `json:"quality,omitempty"`
}

const defaultBrotliQuality = 4

// CaddyModule returns the Caddy module information.
func (Brotli) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.encoders.br",
		New: func() caddy.Module { return new(Brotli) },
	}
}

// UnmarshalCaddyfile reads `br [<quality>]`.
func (b *Brotli) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the encoding's name
	if !d.NextArg() {
		return nil
	}
	q, err := strconv.Atoi(d.Val())
	if err != nil {
		return d.Errf("br quality must be an integer from %d to %d, got %q", brotli.BestSpeed, brotli.BestCompression, d.Val())
	}
	b.Quality = &q
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// Validate checks the quality.
func (b Brotli) Validate() error {
	if q := b.quality(); q < brotli.BestSpeed || q > brotli.BestCompression {
		return fmt.Errorf("br quality must be from %d to %d, got %d", brotli.BestSpeed, brotli.BestCompression, q)
	}
	return nil
}

func (b Brotli) quality() int {
	if b.Quality == nil {
		return defaultBrotliQuality
	}
	return *b.Quality
}

// AcceptEncoding returns the name of the encoding as used in HTTP.
func (Brotli) AcceptEncoding() string { return "br" }

// NewEncoder returns a new Brotli writer.
func (b Brotli) NewEncoder() encode.Encoder {
	return brotli.NewWriterLevel(nil, b.quality())
}

// Interface guards
var (
	_ encode.Encoding       = (*Brotli)(nil)
	_ caddyfile.Unmarshaler = (*Brotli)(nil)
	_ caddy.Validator       = (*Brotli)(nil)
)
