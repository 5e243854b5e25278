// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// A PHP thread never waits on a client's upload either. The handler goroutine reads the
// whole request body before the request goes to PHP: in memory up to a bound per
// request (and while all requests together hold less than a bound per process), the
// rest into a temporary file, unlinked at once. PHP then reads it from there at memory
// or disk speed. So a slow or stalled upload costs a goroutine and some disk, not a PHP
// thread, as nginx's client_body_buffer spares php-fpm. The response side is response.go.

// Bodies up to this size travel with the request to the core in one copy; larger ones
// are read by PHP through the read_body callback.
const readAheadBody = 64 * 1024

// Default bounds of the request bodies kept in memory (request_buffer,
// request_buffer_total).
const (
	DefaultRequestBuffer      = 1 << 20
	DefaultRequestBufferTotal = 64 << 20
)

// What all buffered request bodies hold now, whichever config they belong to (read by
// the metrics).
var (
	bodyBuffered   atomic.Int64 // bytes of memory held by bodies
	bodySpillFiles atomic.Int64 // spill files open
	bodySpills     atomic.Uint64
)

// requestBody is a request body read whole before PHP runs: pooled chunks in memory,
// then a spill file. It is read once, from the start, by the PHP thread (under the
// phpRequest's mutex), and closed by the last owner of the request.
type requestBody struct {
	chunks []*[chunkSize]byte
	size   int64 // bytes read ahead in all, memory then file
	memory int64 // bytes of the chunks (counted whole in bodyBuffered)
	spill  *os.File
	pos    int64     // the next byte PHP reads
	rest   io.Reader // what follows a body longer than the read-ahead limit: the client's
}

// complete says whether the whole body was read ahead.
func (rb *requestBody) complete() bool {
	return rb.rest == nil
}

// bufferBody reads body to its end within policy's bounds. With limit > 0 it reads
// limit+1 bytes at most: the rest of a longer body stays with the client, for PHP to
// read (PHP refuses a body past post_max_size, the limit the handler passes, so the
// disk holds no more than PHP could take). An error says why the body did not arrive
// whole; what was read is released.
func bufferBody(client io.Reader, policy BufferPolicy, limit int64) (*requestBody, error) {
	rb := &requestBody{}
	body := client
	var limited *io.LimitedReader
	if limit > 0 {
		limited = &io.LimitedReader{R: client, N: limit + 1}
		body = limited
	}
	defer func() {
		if limited != nil && limited.N == 0 {
			rb.rest = client
		}
	}()
	for {
		if rb.memory+chunkSize > policy.Limit || bodyBuffered.Add(chunkSize) > policy.Total {
			if rb.memory+chunkSize <= policy.Limit {
				bodyBuffered.Add(-chunkSize) // the total bound refused the chunk
			}
			break
		}
		chunk := chunks.Get().(*[chunkSize]byte)
		rb.chunks = append(rb.chunks, chunk)
		rb.memory += chunkSize
		n, err := readBody(body, chunk[:])
		rb.size += int64(n)
		if err != nil {
			rb.close()
			return nil, err
		}
		if n < chunkSize {
			return rb, nil
		}
	}
	// Past the bounds: the rest goes to disk, unless the body ended exactly here.
	var probe [1]byte
	n, err := readBody(body, probe[:])
	if err != nil || n == 0 {
		if err != nil {
			rb.close()
			return nil, err
		}
		return rb, nil
	}
	f, err := os.CreateTemp("", "php_worker-request-*")
	if err != nil {
		rb.close()
		return nil, fmt.Errorf("%w: %w", errSpill, err)
	}
	// Unlinked at once: the file goes away with its descriptor, whatever happens.
	_ = os.Remove(f.Name())
	rb.spill = f
	bodySpillFiles.Add(1)
	bodySpills.Add(1)
	buf := chunks.Get().(*[chunkSize]byte)
	defer chunks.Put(buf)
	buf[0] = probe[0]
	written, err := copyBody(f, body, buf[:], 1)
	rb.size += written
	if err != nil {
		rb.close()
		return nil, err
	}
	return rb, nil
}

// errSpill marks a body that could not be written to its spill file (the disk).
var errSpill = errors.New("cannot write the request body to a temporary file")

// copyBody copies body into f through buf, whose first pending bytes are already read;
// read errors are the client's, write errors are wrapped in errSpill.
func copyBody(f *os.File, body io.Reader, buf []byte, pending int) (int64, error) {
	var written int64
	for {
		n, rerr := readBody(body, buf[pending:])
		n += pending
		pending = 0
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return written, fmt.Errorf("%w: %w", errSpill, err)
			}
			written += int64(n)
		}
		if rerr != nil {
			return written, rerr
		}
		if n < len(buf) {
			return written, nil
		}
	}
}

// read copies the body's bytes from the read position into buf, then (past the
// read-ahead limit) the client's: the count, short only at the end of the body.
func (rb *requestBody) read(buf []byte) (int, error) {
	n, err := rb.readAhead(buf)
	if err == nil && n < len(buf) && rb.rest != nil {
		// Past the read-ahead limit: the client's bytes, as they come.
		m, err := readBody(rb.rest, buf[n:])
		return n + m, err
	}
	return n, err
}

// readAhead copies the bytes read ahead, memory then spill file, from the read
// position into buf.
func (rb *requestBody) readAhead(buf []byte) (int, error) {
	n := 0
	for n < len(buf) && rb.pos < rb.size {
		if rb.pos < int64(len(rb.chunks))*chunkSize {
			memEnd := min(rb.size, int64(len(rb.chunks))*chunkSize)
			chunk := rb.chunks[rb.pos/chunkSize]
			from := rb.pos % chunkSize
			to := min(int64(chunkSize), from+(memEnd-rb.pos))
			m := copy(buf[n:], chunk[from:to])
			n += m
			rb.pos += int64(m)
			continue
		}
		fileOff := rb.pos - int64(len(rb.chunks))*chunkSize
		want := min(int64(len(buf)-n), rb.size-rb.pos)
		m, err := rb.spill.ReadAt(buf[n:n+int(want)], fileOff)
		n += m
		rb.pos += int64(m)
		if err != nil && m < int(want) {
			return n, fmt.Errorf("reading the buffered request body back: %w", err)
		}
	}
	return n, nil
}

// copyTo copies the whole body into dst, which is size bytes long (a body small
// enough to travel with the request).
func (rb *requestBody) copyTo(dst []byte) error {
	rb.pos = 0
	n, err := rb.read(dst)
	if err == nil && int64(n) != rb.size {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// close releases the memory and the spill file. It may be called more than once.
func (rb *requestBody) close() {
	for _, c := range rb.chunks {
		chunks.Put(c)
	}
	if rb.memory > 0 {
		bodyBuffered.Add(-rb.memory)
	}
	rb.chunks, rb.memory = nil, 0
	if rb.spill != nil {
		rb.spill.Close()
		rb.spill = nil
		bodySpillFiles.Add(-1)
	}
}

// readBody fills buf from body: the count, short only at the end of the body, and an
// error when the body did not end properly. Unlike io.ReadFull it keeps io.EOF (the
// end) apart from io.ErrUnexpectedEOF (a client that left in the middle of its body).
func readBody(body io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := body.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// bodyErrorStatus is the status for a request whose body could not be read: 413 past
// Caddy's request_body max_size, 408 after its read timeout, 500 when the spill file
// could not be written (the server's disk), else 400.
func bodyErrorStatus(err error) int {
	var handlerErr caddyhttp.HandlerError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &handlerErr) && handlerErr.StatusCode != 0:
		return handlerErr.StatusCode
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout
	case errors.Is(err, errSpill):
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// BodyBytesBuffered is the memory all buffered request bodies hold now.
func BodyBytesBuffered() int64 { return bodyBuffered.Load() }

// BodySpillFiles is the request bodies' spill files open now.
func BodySpillFiles() int64 { return bodySpillFiles.Load() }

// BodySpills counts the request bodies that spilled to disk.
func BodySpills() uint64 { return bodySpills.Load() }
