// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"go.uber.org/zap"
)

// phpRequest is the Go side of a request PHP is running. The handler goroutine waits on
// done; the core's callbacks, on a PHP thread, write the response through it.
type phpRequest struct {
	w      http.ResponseWriter
	r      *http.Request
	logger *zap.Logger
	done   chan struct{}

	mu        sync.Mutex
	finished  bool // the DONE callback came: the core forgot this request
	abandoned bool // the handler stopped waiting; w and r.Body are off limits
	core      *C.php_worker_request_t
	status    int // status sent to the client, 0 before headers
}

// respond writes response data; false when the client is gone.
func (pr *phpRequest) respond(status int, headers []C.php_worker_header_t, body []byte, flags uint32) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ok := !pr.abandoned
	if ok && flags&C.PHP_WORKER_RESPONSE_INFORMATIONAL != 0 {
		h := pr.w.Header()
		for i := range headers {
			h.Add(headerString(headers[i].name, headers[i].name_len), headerString(headers[i].value, headers[i].value_len))
		}
		pr.w.WriteHeader(status)
		// The final response sends PHP's whole header list again.
		clear(h)
		return true
	}
	if ok && status != 0 {
		h := pr.w.Header()
		for i := range headers {
			name := headerString(headers[i].name, headers[i].name_len)
			h.Add(name, headerString(headers[i].value, headers[i].value_len))
		}
		if status < 100 || status > 999 {
			pr.logger.Warn("PHP set an invalid HTTP status; sending 500", zap.Int("status", status))
			status = http.StatusInternalServerError
		}
		pr.w.WriteHeader(status)
		pr.status = status
	}
	if ok && len(body) > 0 {
		if _, err := pr.w.Write(body); err != nil {
			pr.logger.Debug("client went away while PHP was writing", zap.Error(err))
			ok = false
		}
	}
	if ok && flags&C.PHP_WORKER_RESPONSE_FLUSH != 0 {
		if err := http.NewResponseController(pr.w).Flush(); err != nil {
			ok = false
		}
	}
	if flags&C.PHP_WORKER_RESPONSE_DONE != 0 {
		pr.finished = true
		close(pr.done)
	}
	return ok
}

// readBody fills buf from the request body; the count (short only at the end), or -1.
func (pr *phpRequest) readBody(buf []byte) int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.abandoned {
		return -1
	}
	n, err := io.ReadFull(pr.r.Body, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		pr.logger.Warn("reading the request body failed", zap.Error(err))
		if n == 0 {
			return -1
		}
	}
	return n
}

// abandon stops the callbacks from touching the response (the client is gone) and
// withdraws the request if it has not started.
func (pr *phpRequest) abandon() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.abandoned = true
	if !pr.finished {
		cancelRequest(pr.core)
	}
}

// withdraw cancels the request if it still waits for a PHP thread; true when it will
// not run, and the caller answers the client.
func (pr *phpRequest) withdraw() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.finished || !cancelRequest(pr.core) {
		return false
	}
	pr.abandoned = true
	return true
}
