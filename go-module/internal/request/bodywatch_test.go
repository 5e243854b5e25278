// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// A body read to its end must leave no read deadline on the connection: Go's server
// then reads the connection in the background, and a deadline firing there cancels the
// request while PHP still runs (its answer lost for an empty 200).
func TestAWatchedBodyLeavesNoDeadlineOnceItEnded(t *testing.T) {
	const idle = 100 * time.Millisecond
	for _, size := range []int{100_000, 1 << 20} { // one ends inside a read, one on a 64 KiB boundary
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			WatchBody(w, r, idle)
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			select {
			case <-r.Context().Done():
				http.Error(w, "cancelled while the script ran", http.StatusInternalServerError)
				return
			case <-time.After(5 * idle): // the script runs on after the body arrived
			}
			_, _ = io.WriteString(w, strings.Repeat("x", int(n%7))+"done")
		}))
		resp, err := http.Post(srv.URL, "application/octet-stream", bytes.NewReader(make([]byte, size)))
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(body), "done") {
			t.Errorf("%d bytes: %d %q", size, resp.StatusCode, body)
		}
		srv.Close()
	}
}

// Once cut, a watched body fails every read at once and never arms the deadline again.
func TestACutBodyFailsItsReadsAtOnce(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var armed []time.Time
	b := &bodyWatch{ReadCloser: pr, idle: time.Hour}
	b.setDeadline = func(at time.Time) { armed = append(armed, at) }
	b.cut()
	start := time.Now()
	if n, err := b.Read(make([]byte, 10)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read after the cut: %d, %v", n, err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("the read waited")
	}
	if len(armed) != 1 || armed[0].After(time.Now()) {
		t.Fatalf("the cut sets a deadline in the past, and no read sets another: %v", armed)
	}
}

// A body that ended stays ended: a later cut leaves the connection's deadline alone.
func TestACutAfterTheEndLeavesTheDeadlineCleared(t *testing.T) {
	var armed []time.Time
	b := &bodyWatch{ReadCloser: io.NopCloser(strings.NewReader("abc")), idle: time.Minute}
	b.setDeadline = func(at time.Time) { armed = append(armed, at) }
	if got, err := io.ReadAll(b); err != nil || string(got) != "abc" {
		t.Fatalf("%q, %v", got, err)
	}
	b.cut()
	if n := len(armed); n < 2 || !armed[n-1].IsZero() {
		t.Fatalf("the end clears the deadline and the cut does not set one: %v", armed)
	}
}
