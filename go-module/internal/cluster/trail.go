// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A child's standard error, copied to the server's, with the crash trail a fatal signal
// on a PHP thread leaves, logged at the child's death.

// trailWriter passes a child's standard error on, line by line, and keeps the crash
// trail line (rust-core/csrc/crash.c) a PHP thread writes when it gets a fatal signal,
// so the log line of the child's death names the request and the PHP code.
type trailWriter struct {
	out    io.Writer
	mu     sync.Mutex
	line   []byte
	last   map[string]any
	lastAt time.Time // when last came
}

// trailWindow is how long before a child's death its trail may come: the handler writes
// it and raises the signal at once.
const trailWindow = 5 * time.Second

// trailMessage starts the trail line's message.
const trailMessage = "PHP thread received a fatal signal"

func (w *trailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(w.line) < 1<<20 {
				w.line = append(w.line, b...)
			}
			break
		}
		w.line = append(w.line, b[:i+1]...)
		b = b[i+1:]
		w.take(w.line)
		w.line = w.line[:0]
	}
	return n, nil
}

func (w *trailWriter) take(line []byte) {
	_, _ = w.out.Write(line)
	if !bytes.Contains(line, []byte(trailMessage)) {
		return
	}
	var m map[string]any
	if json.Unmarshal(line, &m) == nil {
		w.last, w.lastAt = m, time.Now()
	}
}

// end passes on an unfinished last line (a trail cut short by a second fault).
func (w *trailWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.take(append(w.line, '\n'))
		w.line = w.line[:0]
	}
}

// fields are the trail's fields for the log line of a death by signal (its name, ""
// for an exit) at died: which signal, request and PHP code. Any line of standard error
// can quote the trail's message (an app's JSON log line with user input in it), so a
// trail counts only if it names the signal the child died of and came within
// trailWindow before.
func (w *trailWriter) fields(signal string, died time.Time) []zap.Field {
	w.mu.Lock()
	defer w.mu.Unlock()
	if named, _ := w.last["signal"].(string); named == "" || named != signal || died.Sub(w.lastAt) > trailWindow {
		return nil
	}
	var out []zap.Field
	for _, key := range []string{"signal", "thread", "method", "uri", "script", "php_function", "php_file", "php_line"} {
		if v, ok := w.last[key]; ok {
			out = append(out, zap.Any(key, v))
		}
	}
	return out
}
