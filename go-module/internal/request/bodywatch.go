// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// bodyWatch ends a read of the request body that waits longer than idle for a byte
// (request_body_timeout): the connection's read deadline moves before each read, and a
// timeout reads as os.ErrDeadlineExceeded, answered 408.
//
// The deadline is the connection's, not the body's, so it must not outlive the body:
// once the body ends, Go's server keeps reading the connection in the background to
// notice a client that leaves, and a deadline still armed then fails that read and
// cancels the request while PHP runs (its answer lost, an empty 200 sent). At the body's
// end the deadline is cleared, as Caddy's own idle-timeout reader does. And once the
// handler cuts the reads off (cut), no read may arm it again.
type bodyWatch struct {
	io.ReadCloser
	idle time.Duration
	// setDeadline sets the connection's read deadline (the zero time clears it).
	setDeadline func(time.Time)

	mu    sync.Mutex
	state watchState
}

type watchState uint8

const (
	watchReading watchState = iota // the deadline moves with each read
	watchEnded                     // the body ended: the deadline is cleared
	watchCut                       // the handler cut the reads off: the deadline is in the past
)

// WatchBody puts the body's idle timeout on r (none when idle is 0, or r has no body).
// Call it before anything reads the body.
func WatchBody(w http.ResponseWriter, r *http.Request, idle time.Duration) {
	if idle > 0 && r.Body != nil && r.Body != http.NoBody {
		conn := http.NewResponseController(w)
		r.Body = &bodyWatch{ReadCloser: r.Body, idle: idle,
			setDeadline: func(at time.Time) { _ = conn.SetReadDeadline(at) }}
	}
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	b.mu.Lock()
	switch b.state {
	case watchEnded:
		b.mu.Unlock()
		return 0, io.EOF
	case watchCut:
		b.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	b.setDeadline(time.Now().Add(b.idle))
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.mu.Lock()
		if b.state == watchReading {
			b.state = watchEnded
			b.setDeadline(time.Time{})
		}
		b.mu.Unlock()
	}
	return n, err
}

// cut ends a read waiting on the client now, and every later one at once; a body that
// already ended is left alone (its deadline stays cleared).
func (b *bodyWatch) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == watchReading {
		b.state = watchCut
		b.setDeadline(time.Now())
	}
}

// replayBody is a body whose first bytes were read ahead (a form looked into for a
// debug trigger, PeekForm) and are read again before the rest.
type replayBody struct {
	io.Reader
	io.Closer
	watch *bodyWatch // the body's idle timeout under it, if any
}

// watchOf is the idle timeout on body, if it has one.
func watchOf(body io.ReadCloser) *bodyWatch {
	switch b := body.(type) {
	case *bodyWatch:
		return b
	case *replayBody:
		return b.watch
	}
	return nil
}

// PeekForm reads a url-encoded form body of at most limit bytes, as its Content-Length
// announces it, and puts it back for PHP to read the same bytes: its fields, or nil
// when r has no such body. A body that did not arrive whole gives nil too, and its
// error comes back to the first read past the bytes that did. Call it after WatchBody:
// a client that stalls is bound by the body's idle timeout here as everywhere.
func PeekForm(r *http.Request, limit int64) url.Values {
	if r.ContentLength <= 0 || r.ContentLength > limit || r.Body == nil || r.Body == http.NoBody ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return nil
	}
	body := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, body)
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(body[:n]), errorReader{err}), Closer: r.Body,
		watch: watchOf(r.Body)}
	if err != nil {
		return nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil
	}
	return form
}

// errorReader ends a body read back with the error its first read met (nil: io.EOF).
type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, io.EOF
	}
	return 0, e.err
}
