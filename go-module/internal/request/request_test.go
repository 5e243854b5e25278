// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// cutBody yields data, then fails with err, as Go's body reader does when the client
// leaves (io.ErrUnexpectedEOF) or a deadline passes.
type cutBody struct {
	data string
	err  error
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.data == "" {
		return 0, c.err
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func TestReadBodyTellsTheEndFromAClientThatLeft(t *testing.T) {
	buf := make([]byte, 8)
	n, err := readBody(iotest.OneByteReader(strings.NewReader("abc")), buf)
	if n != 3 || err != nil {
		t.Errorf("a complete body: got %d, %v; want 3, nil", n, err)
	}
	n, err = readBody(strings.NewReader("abcdefghij"), buf)
	if n != 8 || err != nil {
		t.Errorf("a body longer than the buffer: got %d, %v; want 8, nil", n, err)
	}
	n, err = readBody(&cutBody{"abc", io.ErrUnexpectedEOF}, buf)
	if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body cut short: got %d, %v; want 3, io.ErrUnexpectedEOF", n, err)
	}
}

func TestBodyErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), http.StatusRequestTimeout},
		{caddyhttp.Error(http.StatusRequestEntityTooLarge, &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge},
		{&http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge},
		{io.ErrUnexpectedEOF, http.StatusBadRequest},
	} {
		if got := bodyErrorStatus(tc.err); got != tc.want {
			t.Errorf("bodyErrorStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestRefusalsAreAnsweredByTheHandler(t *testing.T) {
	site := &Site{Logger: zap.NewNop()}
	worker := Route{Pool: new(phpruntime.Pool), Name: "app"}
	for _, tc := range []struct {
		why        refusal
		worker     Route
		body       string
		retryAfter string
	}{
		{refusal{code: core.RefusedStopped}, worker, "503 Service Unavailable: worker app stopped\n", "1"},
		{refusal{code: core.RefusedStopped}, Route{}, "503 Service Unavailable: the classic PHP threads stopped\n", "1"},
		{refusal{code: core.RefusedBootFailing, retryAfter: 1600 * time.Millisecond}, worker,
			"503 Service Unavailable: worker app fails to start; the server log says why\n", "2"},
		{refusal{code: core.RefusedBootFailing, retryAfter: 100 * time.Millisecond}, worker,
			"503 Service Unavailable: worker app fails to start; the server log says why\n", "1"},
		// PHP_WORKER_REFUSED_LOST, or a code this version does not know.
		{refusal{code: 99}, worker, "503 Service Unavailable: the request was lost\n", "1"},
	} {
		w := httptest.NewRecorder()
		if err := site.refused(w, &phpRequest{refusal: tc.why}, tc.worker); err != nil {
			t.Fatalf("%+v: %v", tc.why, err)
		}
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != tc.body || w.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%+v: %d %q Retry-After %q", tc.why, w.Code, w.Body.String(), w.Header().Get("Retry-After"))
		}
	}
	// A body that stopped arriving is answered for the reason Go saw.
	for bodyErr, status := range map[error]int{
		os.ErrDeadlineExceeded: http.StatusRequestTimeout,
		io.ErrUnexpectedEOF:    http.StatusBadRequest,
		nil:                    http.StatusBadRequest,
	} {
		err := site.refused(httptest.NewRecorder(), &phpRequest{refusal: refusal{code: core.RefusedBody}, bodyErr: bodyErr}, worker)
		var he caddyhttp.HandlerError
		if !errors.As(err, &he) || he.StatusCode != status {
			t.Errorf("body error %v: got %v, want status %d", bodyErr, err, status)
		}
	}
}

// recordingWriter is a client: it records what reaches it.
type recordingWriter struct {
	header http.Header
	wrote  []byte
	status int
}

func (w *recordingWriter) Header() http.Header    { return w.header }
func (w *recordingWriter) WriteHeader(status int) { w.status = status }
func (w *recordingWriter) Write(b []byte) (int, error) {
	w.wrote = append(w.wrote, b...)
	return len(b), nil
}

func TestACompletionIsNeverWrittenByTheGoroutineThatDeliversIt(t *testing.T) {
	for _, from := range []core.Delivery{core.OnPHPThread, core.FromCompletions} {
		w := &recordingWriter{header: http.Header{}}
		pr := &phpRequest{w: w, wake: make(chan struct{}, 1), uri: "/"}
		pr.out.BufferPolicy = BufferPolicy{Off: true}
		body := []byte("hello")
		if !pr.respond(core.Response{Status: 200, Body: body, Flags: core.ResponseDone}, from) {
			t.Fatalf("delivery %v: the client is not gone", from)
		}
		body[0] = 'J' // the core reuses or frees its bytes once the call returns
		if from == core.OnPHPThread {
			if w.status != 200 || string(w.wrote) != "hello" || len(pr.out.parts) != 0 {
				t.Errorf("a callback with response_buffer off writes to the client itself: %d %q", w.status, w.wrote)
			}
			continue
		}
		if w.status != 0 || len(w.wrote) != 0 {
			t.Errorf("a completion reached the client from the delivering goroutine: %d %q", w.status, w.wrote)
		}
		parts := pr.out.take()
		if len(parts) != 2 || parts[0].kind != partHeader || parts[0].status != 200 || string(parts[1].data) != "hello" {
			t.Errorf("the handler goroutine gets the status and a copy of the body: %+v", parts)
		}
		if !pr.finished {
			t.Error("DONE came")
		}
	}
}

// TestACompletionNeverSpillsOnTheGoroutineThatDeliversIt: the one goroutine that
// delivers every request's completion never waits on the disk. A completion's body
// (at most the core's 64 KiB stream chunk) past the memory bounds stays in memory for
// the handler goroutine; here the spill file could not even be created.
func TestACompletionNeverSpillsOnTheGoroutineThatDeliversIt(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	pr := &phpRequest{site: testSite, wake: make(chan struct{}, 1), uri: "/"}
	pr.out.BufferPolicy = BufferPolicy{Limit: 16, Total: 64 << 20}
	defer pr.out.reset()
	body := bytes.Repeat([]byte("x"), 1000)
	if !pr.respond(core.Response{Status: 200, Body: body, Flags: core.ResponseDone}, core.FromCompletions) {
		t.Fatal("a completion past the bound was refused: the delivering goroutine tried the disk")
	}
	if pr.truncated || pr.out.spill != nil {
		t.Fatalf("truncated %v, spill file %v", pr.truncated, pr.out.spill)
	}
	var got []byte
	for _, p := range pr.out.take() {
		got = append(got, p.data...)
	}
	if !bytes.Equal(got, body) {
		t.Errorf("the body is queued in memory whole: %d bytes", len(got))
	}

	// From a PHP thread (the respond callback), the bound holds: the body goes to the
	// spill file, which cannot be created here, so the response is cut off.
	pr2 := &phpRequest{site: testSite, wake: make(chan struct{}, 1), uri: "/"}
	pr2.out.BufferPolicy = BufferPolicy{Limit: 16, Total: 64 << 20}
	defer pr2.out.reset()
	if pr2.respond(core.Response{Status: 200, Body: body}, core.OnPHPThread) || !pr2.truncated {
		t.Error("a callback past the bound must spill, and fail without a spill file")
	}
}

// TestAChildsResponseKeepsToTheMemoryBounds: a child process's read loop delivers
// responses of any size for many requests. Past the bounds their bodies spill to disk,
// with response buffering off too (a child's PHP thread cannot wait on the client), and
// nothing reaches the client from the read loop.
func TestAChildsResponseKeepsToTheMemoryBounds(t *testing.T) {
	for _, off := range []bool{false, true} {
		w := &recordingWriter{header: http.Header{}}
		pr := &phpRequest{w: w, site: testSite, wake: make(chan struct{}, 1), uri: "/"}
		pr.out.BufferPolicy = BufferPolicy{Limit: 64 << 10, Total: 64 << 20, Off: off}
		chunk := bytes.Repeat([]byte("x"), 48<<10)
		for i := 0; i < 8; i++ {
			if !pr.respond(core.Response{Status: 200, Body: chunk}, core.FromChild) {
				t.Fatalf("off=%v: chunk %d refused", off, i)
			}
		}
		if w.status != 0 || len(w.wrote) != 0 {
			t.Errorf("off=%v: the read loop wrote to the client", off)
		}
		if pr.out.memory > 64<<10 || pr.out.spill == nil {
			t.Errorf("off=%v: %d bytes in memory past a 64 KiB bound, spill file %v", off, pr.out.memory, pr.out.spill)
		}
		var n int64
		for _, p := range pr.out.take() {
			n += int64(len(p.data)) + p.length
		}
		if n != 8*48<<10 {
			t.Errorf("off=%v: %d bytes queued, want every byte", off, n)
		}
		pr.out.reset()
	}
}

// testSite is a site with no PHP running, for requests made by hand.
var testSite = &Site{Runtime: phpruntime.New("test", "test"), Logger: zap.NewNop()}
