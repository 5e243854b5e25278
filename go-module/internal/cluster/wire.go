// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The wire between the Caddy process and a child: one Unix stream socket, frames of a
// 16-byte head (payload length, kind, an id) and a payload. Requests and responses, the
// hot path, are packed by hand (packing.go); the rare control calls carry JSON.
//
// Each side writes through a link: senders append whole frames to a buffer under a
// lock, and one goroutine writes the buffer out. Under load many frames leave in one
// write(2), so the hand-over costs a fraction of a system call per request; an idle
// link costs one goroutine wake-up.

// The kinds of frames, and the layouts of their payloads, are the core's
// (PHP_WORKER_WIRE_* in php_worker.h): a child's request path is served by the core.

// The kinds of frames from the Caddy process to a child.
const (
	kindCall       = core.WireCall       // id: the call; JSON call
	kindSubmit     = core.WireSubmit     // id: the request's handle; packed submission
	kindCancel     = core.WireCancel     // id: the handle; empty
	kindBody       = core.WireBody       // id: the handle; 8-byte count (-1: unreadable), bytes
	kindClientGone = core.WireClientGone // id: the handle; empty
	kindStoreReply = core.WireStoreReply // id: the operation; encoded shared table reply
)

// The kinds of frames from a child to the Caddy process.
const (
	kindReply        = core.WireReply        // id: the call; JSON reply
	kindRespond      = core.WireRespond      // id: the handle; packed response
	kindReadBody     = core.WireReadBody     // id: the handle; 4-byte count wanted
	kindLog          = core.WireLog          // id: the handle or 0; packed line
	kindSubmitFailed = core.WireSubmitFailed // id: the handle; 4-byte core code
	kindCancelled    = core.WireCancelled    // id: the handle; 1 byte, 1 when withdrawn
	kindStore        = core.WireStore        // id: the operation; encoded shared table operation
)

const headLen = core.WireHead

// maxFrame bounds a frame's payload. The senders keep to it: response bodies cross in
// pieces, log lines are cut, and shared table values and call replies past it are
// refused; a frame past it is never queued, so the peer never sees one (its reader ends
// the wire on one).
const maxFrame = core.WireMaxFrame

// pendingLimit is how many bytes a link buffers before senders wait for the writer.
const pendingLimit = 4 << 20

var errClosed = errors.New("the child's link is closed")

// link is one side of the wire. Its sender writes too: the first to find no write in
// progress writes what is queued, its own frame with it; what others queue meanwhile
// leaves together in the next write, a writer goroutine's. An idle link wakes no
// goroutine, and a sender never writes more than once (see flush).
type link struct {
	f *os.File

	mu      sync.Mutex
	cond    *sync.Cond // signalled when a write ends, or the link closed
	pending []byte
	spare   []byte
	writing bool
	closed  bool
}

func newLink(f *os.File) *link {
	l := &link{f: f}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// send queues one frame made of its parts and writes out what is queued unless a
// write is in progress; false when the link is closed or the frame past maxFrame.
func (l *link) send(kind uint8, id uint64, parts ...[]byte) bool {
	return l.sendWith(kind, id, true, func(dst []byte) []byte {
		for _, p := range parts {
			dst = append(dst, p...)
		}
		return dst
	})
}

// post queues a frame without ever blocking the caller: a goroutine writes it if no
// write is in progress. For the read loops, which must never wait on the peer's reads
// (the peer may be waiting on ours).
func (l *link) post(kind uint8, id uint64, parts ...[]byte) bool {
	return l.sendWith(kind, id, false, func(dst []byte) []byte {
		for _, p := range parts {
			dst = append(dst, p...)
		}
		return dst
	})
}

// sendWith queues a frame whose payload fill appends; see send and post for mayWrite.
func (l *link) sendWith(kind uint8, id uint64, mayWrite bool, fill func([]byte) []byte) bool {
	mode := modePost
	if mayWrite {
		mode = modeSend
	}
	return l.queue(kind, id, mode, fill)
}

// How a sender treats the write of its frame.
const (
	modePost = iota // never waits: a goroutine writes if nobody does
	modeSend        // writes what is queued unless a write is running
)

func (l *link) queue(kind uint8, id uint64, mode int, fill func([]byte) []byte) bool {
	l.mu.Lock()
	for mode != modePost && len(l.pending) > pendingLimit && l.writing && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return false
	}
	at := len(l.pending)
	var head [headLen]byte
	head[4] = kind
	binary.LittleEndian.PutUint64(head[8:], id)
	l.pending = fill(append(l.pending, head[:]...))
	n := len(l.pending) - at - headLen
	if n > maxFrame {
		// A sender's bug, refused here rather than ending the wire and every request
		// on it at the peer's reader.
		l.pending = l.pending[:at]
		l.mu.Unlock()
		return false
	}
	binary.LittleEndian.PutUint32(l.pending[at:], uint32(n))
	if !l.writing {
		l.writing = true
		if mode == modePost {
			l.mu.Unlock()
			go l.writer()
			return true
		}
		l.flush(true)
		return true
	}
	l.mu.Unlock()
	return true
}

// writer writes what is queued until nothing is, on a goroutine of its own.
func (l *link) writer() {
	l.mu.Lock()
	l.flush(false)
}

// flush writes until nothing is queued; called with mu held and writing set, it
// returns with mu released. A sender (a PHP thread in Respond, a handler goroutine
// submitting) writes once, its own frame with what was queued before it: what others
// queue meanwhile goes to a writer goroutine, so a sender never stays in the loop for
// as long as others keep queueing (its script would stall, and its deadline pass).
func (l *link) flush(sender bool) {
	for first := true; len(l.pending) > 0 && !l.closed; first = false {
		if sender && !first {
			l.mu.Unlock()
			go l.writer() // writing stays set: the writer takes over
			return
		}
		out := l.pending
		l.pending, l.spare = l.spare[:0], nil
		l.mu.Unlock()
		_, err := l.f.Write(out)
		if err != nil {
			l.close()
		}
		l.mu.Lock()
		if cap(out) <= 1<<20 {
			l.spare = out[:0]
		}
		l.cond.Broadcast()
	}
	l.writing = false
	l.cond.Broadcast()
	l.mu.Unlock()
}

// isClosed says whether the link ended.
func (l *link) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// close ends the link: queued frames are dropped, senders get false, and the peer
// reads the end of the stream.
func (l *link) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.pending = nil
	l.cond.Broadcast()
	l.mu.Unlock()
	_ = l.f.Close()
}

// endReads makes this side's reader get what the peer wrote and then the end of the
// stream, even while another process still holds the peer's end (shutdown(2) for
// reading, which a close would not wait for); writes go on until close.
func (l *link) endReads() {
	if rc, err := l.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RD) })
	}
}

// reader reads frames; the payload it returns is valid until the next read.
type reader struct {
	r   *bufio.Reader
	buf []byte
}

func newReader(f io.Reader) *reader {
	return &reader{r: bufio.NewReaderSize(f, 256<<10)}
}

func (r *reader) next() (kind uint8, id uint64, payload []byte, err error) {
	var head [headLen]byte
	if _, err = io.ReadFull(r.r, head[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.LittleEndian.Uint32(head[0:])
	if n > maxFrame {
		return 0, 0, nil, errors.New("a frame past the size limit")
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	payload = r.buf[:n]
	if _, err = io.ReadFull(r.r, payload); err != nil {
		return 0, 0, nil, err
	}
	return head[4], binary.LittleEndian.Uint64(head[8:]), payload, nil
}
