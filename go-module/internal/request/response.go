// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
)

// A PHP thread never waits on a client. Its output goes into its request's queue of
// response parts, and the handler goroutine, the only one that writes to the client,
// sends them. A part's body stays in memory up to a bound per request (and while all
// requests together hold less than a bound per process); past it, bodies go to a
// temporary file the goroutine reads back. So a slow or stalled client costs a
// goroutine and some disk, not a PHP thread, as nginx's buffering spares php-fpm.

// Default bounds of the response bodies kept in memory (response_buffer,
// response_buffer_total).
const (
	DefaultResponseBuffer      = 1 << 20
	DefaultResponseBufferTotal = 64 << 20
)

// What all responses hold now, whichever config they belong to (read by the metrics).
var (
	buffered   atomic.Int64 // body bytes in memory
	spillFiles atomic.Int64 // spill files open
	spills     atomic.Uint64
)

// BufferPolicy says how a response's bodies wait for the client: in memory up to limit
// for this response and total for all of them together (many slow clients make
// responses spill earlier instead of exhausting RAM), or, when off, not at all: the
// PHP thread writes them to the client itself.
type BufferPolicy struct {
	Limit, Total int64
	Off          bool
}

// partKind says what a queued response part is.
type partKind uint8

const (
	partHeader        partKind = iota // the status and headers
	partInformational                 // a 1xx response (103 Early Hints)
	partBody                          // body bytes, in data or in the spill file
	partFlush                         // send what is queued now
)

// chunkSize is the size of the pooled buffers bodies are copied into: reusing them
// keeps a busy server's responses from feeding Go's garbage collector.
const chunkSize = 64 << 10

var chunks = sync.Pool{New: func() any { return new([chunkSize]byte) }}

type responsePart struct {
	kind   partKind
	status int
	header http.Header
	data   []byte           // a body in memory: chunk[:n]
	chunk  *[chunkSize]byte // the pooled buffer behind data
	// A body in the spill file, when data is nil.
	offset, length int64
}

// responseQueue is a request's response on its way from the PHP thread to the client.
// Its fields are guarded by the phpRequest's mutex.
type responseQueue struct {
	BufferPolicy
	parts  []responsePart
	memory int64    // bytes of the queued bodies kept in memory
	spill  *os.File // created (and unlinked) on first need; closed by the handler
	end    int64    // where the next spilled body goes in the file
}

// queueBody queues body bytes, copying them (the caller's bytes belong to the core).
// Past the bounds they go to the spill file; an error when that cannot be written.
// Parts keep their order wherever their bytes are, so bodies return to memory once the
// client has taken enough.
//
// With noDisk (a completion, on the goroutine that delivers every request's), the bytes
// stay in memory whatever the bounds: a slow or full disk must not hold up the other
// requests' completions. A completion carries at most the core's stream chunk (64 KiB),
// so the bounds are passed by that much at most per response.
func (q *responseQueue) queueBody(body []byte, noDisk bool) error {
	n := int64(len(body))
	if noDisk || (q.memory+n <= q.Limit && buffered.Load()+n <= q.Total) {
		q.memory += n
		buffered.Add(n)
		for len(body) > 0 {
			// Fill the last queued chunk, then new ones.
			last := len(q.parts) - 1
			if last < 0 || q.parts[last].chunk == nil || len(q.parts[last].data) == chunkSize {
				q.parts = append(q.parts, responsePart{kind: partBody, chunk: chunks.Get().(*[chunkSize]byte)})
				last++
			}
			p := &q.parts[last]
			m := copy(p.chunk[len(p.data):], body)
			p.data = p.chunk[:len(p.data)+m]
			body = body[m:]
		}
		return nil
	}
	if q.spill == nil {
		f, err := os.CreateTemp("", "php_worker-response-*")
		if err != nil {
			return err
		}
		// Unlinked at once: the file goes away with its descriptor, whatever happens.
		_ = os.Remove(f.Name())
		q.spill = f
		spillFiles.Add(1)
		spills.Add(1)
	}
	if _, err := q.spill.WriteAt(body, q.end); err != nil {
		return err
	}
	q.parts = append(q.parts, responsePart{kind: partBody, offset: q.end, length: n})
	q.end += n
	return nil
}

// take hands the queued parts to the writer; their memory is counted until released.
func (q *responseQueue) take() []responsePart {
	parts := q.parts
	q.parts = nil
	return parts
}

// released gives back the memory of parts that were written or dropped.
func (q *responseQueue) released(parts []responsePart) {
	var n int64
	for i := range parts {
		if parts[i].chunk != nil {
			n += int64(len(parts[i].data))
			chunks.Put(parts[i].chunk)
			parts[i].chunk, parts[i].data = nil, nil
		}
	}
	if n > 0 {
		q.memory -= n
		buffered.Add(-n)
	}
}

// reset drops everything queued and closes the spill file.
func (q *responseQueue) reset() {
	q.released(q.take())
	if q.spill != nil {
		q.spill.Close()
		q.spill = nil
		spillFiles.Add(-1)
	}
	q.end = 0
}

// errClientGone marks a write that failed because of the client.
var errClientGone = errors.New("the client stopped reading the response")

// writeParts sends parts to the client: the handler goroutine's side of the queue.
// A part in the spill file is copied from spill. The error is the client's.
func writeParts(w http.ResponseWriter, spill io.ReaderAt, parts []responsePart) error {
	for _, p := range parts {
		switch p.kind {
		case partInformational:
			h := w.Header()
			for k, v := range p.header {
				h[k] = v
			}
			w.WriteHeader(p.status)
			clear(h) // the final response sends PHP's whole header list again
		case partHeader:
			h := w.Header()
			for k, v := range p.header {
				h[k] = v
			}
			w.WriteHeader(p.status)
		case partBody:
			var err error
			if p.data != nil {
				_, err = w.Write(p.data)
			} else {
				_, err = io.Copy(w, io.NewSectionReader(spill, p.offset, p.length))
			}
			if err != nil {
				return errors.Join(errClientGone, err)
			}
		case partFlush:
			if err := http.NewResponseController(w).Flush(); err != nil {
				return errors.Join(errClientGone, err)
			}
		}
	}
	return nil
}

// ResponseBytesBuffered is the body bytes all responses hold in memory now.
func ResponseBytesBuffered() int64 { return buffered.Load() }

// ResponseSpillFiles is the responses' spill files open now.
func ResponseSpillFiles() int64 { return spillFiles.Load() }

// ResponseSpills counts the responses that spilled to disk.
func ResponseSpills() uint64 { return spills.Load() }
