// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"net/http"
	"net/textproto"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

// Host serves the core's callbacks (core.Host) for the requests Serve submitted: each
// callback finds its request by the handle Serve gave the core.
type Host struct {
	Runtime *phpruntime.Runtime // its logger takes the lines outside a request
}

// Respond queues (or writes) response data for the request's handler goroutine.
func (h Host) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	pr := lookupRequest(handle)
	ok := pr.respond(resp, from)
	if resp.Flags&core.ResponseDone != 0 {
		pr.release() // the core's reference
	}
	return ok
}

// ReadBody reads the request's body for PHP.
func (h Host) ReadBody(handle uintptr, buf []byte) int {
	return lookupRequest(handle).readBody(buf)
}

// Logger is the logger of the request's lines (0: lines outside a request).
func (h Host) Logger(handle uintptr) *zap.Logger {
	if handle == 0 {
		return h.Runtime.Logger()
	}
	return lookupRequest(handle).logger()
}

var _ core.Host = Host{}

// addHeaders adds the headers the core lent for the callback. PHP's header() accepts
// names and values HTTP does not ("Bad Name: x", control characters); Go's server then
// strips or drops them silently, differently for HTTP/1, 2 and 3, and over HTTP/3 an
// invalid name stalled the response. Such headers are dropped with a warning: for a bad
// name once (while the name cache has room), for a bad value each time.
func addHeaders(pr *phpRequest, h http.Header, headers []core.Header) {
	for i := range headers {
		raw := headers[i].Name()
		name, first := canonicalName(raw)
		if name == "" {
			if first {
				pr.logger().Warn("PHP sent a header with an invalid name; dropping it", zap.ByteString("name", raw))
			}
			continue
		}
		value := string(headers[i].Value())
		if !httpguts.ValidHeaderFieldValue(value) {
			pr.logger().Warn("PHP sent a header value with control characters; dropping the header",
				zap.String("name", name))
			continue
		}
		h[name] = append(h[name], value)
	}
}

// headerNames caches the canonical form of the header names PHP sends ("Content-type"
// becomes "Content-Type"; an invalid name maps to ""), so a response allocates only its
// values. Copy on write: lookups take no lock.
var headerNames struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex
}

const maxCachedHeaderNames = 512

// canonicalName returns the name to send, "" for an invalid one, and whether this is
// the first time the name was seen.
func canonicalName(b []byte) (string, bool) {
	if m := headerNames.m.Load(); m != nil {
		if name, ok := (*m)[string(b)]; ok {
			return name, false
		}
	}
	name := ""
	if httpguts.ValidHeaderFieldName(string(b)) {
		name = textproto.CanonicalMIMEHeaderKey(string(b))
	}
	headerNames.mu.Lock()
	defer headerNames.mu.Unlock()
	old := headerNames.m.Load()
	if old == nil || len(*old) < maxCachedHeaderNames {
		next := make(map[string]string, 1+lenOf(old))
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[string(b)] = name
		headerNames.m.Store(&next)
	}
	return name, true
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
