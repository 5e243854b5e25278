// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/php-worker/php_worker/go-module/internal/core"

	"go.uber.org/zap"
)

// phpRequest is the Go side of a request PHP is running. The core's callbacks, on a PHP
// thread, queue the response in it (response.go) and signal wake; the handler
// goroutine sends what is queued to the client until the core's DONE.
//
// phpRequests are recycled: each has a fixed handle (its index in requests) that the
// core passes back in callbacks, and two owners, the handler and the core, each of
// which releases it once; the last release returns it to the free list.
type phpRequest struct {
	handle uintptr
	refs   atomic.Int32
	wake   chan struct{} // signalled when response parts are queued or DONE came

	w    http.ResponseWriter
	r    *http.Request
	uri  string
	site *Site

	// Held while the PHP thread reads the body, outside mu: a client that stops sending
	// holds up nobody else (the watchdog's expiry, the completions). The handler takes
	// it before it returns (endReads), for r.Body is off limits from then on.
	readMu sync.Mutex

	mu        sync.Mutex
	readsOver bool    // the handler is returning: body reads fail at once
	finished  bool    // the DONE callback came: the core forgot this request
	abandoned bool    // the handler stopped waiting; w and r.Body are off limits
	expired   bool    // the core gave up on the request (its deadline passed); DONE follows
	truncated bool    // part of the response could not be buffered: it cannot be sent whole
	refusal   refusal // the core did not serve the request: the handler answers why
	core      core.Submitted
	sent      bool         // the headers left for the client
	bodyErr   error        // why the body could not be read; later reads fail at once
	body      *requestBody // the body read before PHP ran; nil when it streams from r.Body
	watch     *bodyWatch   // r.Body's idle timeout, if it has one
	out       responseQueue
	// What the core told of the request's run, for its trace: the thread (-1 until one
	// took it), how long the request waited for it, and the status PHP chose.
	thread int
	queued time.Duration
	status int
}

// requestChunk is a block of request slots; chunks never move, so lookups need no lock.
const requestChunk = 256

// requests is the table of phpRequests by handle (index + 1; 0 means no request).
var requests struct {
	chunks [1 << 14]atomic.Pointer[[requestChunk]*phpRequest]
	mu     sync.Mutex
	free   []*phpRequest
	count  int
}

// acquireRequest returns a reset phpRequest owned twice (handler and core).
func acquireRequest(site *Site, w http.ResponseWriter, r *http.Request) *phpRequest {
	requests.mu.Lock()
	var pr *phpRequest
	if n := len(requests.free); n > 0 {
		pr = requests.free[n-1]
		requests.free = requests.free[:n-1]
	} else if requests.count < len(requests.chunks)*requestChunk {
		i := requests.count
		requests.count++
		chunk := requests.chunks[i/requestChunk].Load()
		if chunk == nil {
			chunk = new([requestChunk]*phpRequest)
			requests.chunks[i/requestChunk].Store(chunk)
		}
		pr = &phpRequest{handle: uintptr(i + 1), wake: make(chan struct{}, 1), thread: -1}
		chunk[i%requestChunk] = pr
	}
	requests.mu.Unlock()
	if pr == nil {
		return nil // more than 4 million requests in flight
	}
	pr.refs.Store(2)
	pr.w, pr.r, pr.uri, pr.site = w, r, r.RequestURI, site
	pr.out.BufferPolicy = site.ResponseBuffer
	return pr
}

// lookupRequest finds the request of a callback's handle.
func lookupRequest(handle uintptr) *phpRequest {
	i := int(handle) - 1
	return requests.chunks[i/requestChunk].Load()[i%requestChunk]
}

// release drops one owner's reference; the last one recycles the request.
func (pr *phpRequest) release() {
	if pr.refs.Add(-1) != 0 {
		return
	}
	select {
	case <-pr.wake:
	default:
	}
	pr.out.reset()
	if pr.body != nil {
		pr.body.close()
		pr.body = nil
	}
	pr.w, pr.r, pr.site, pr.core, pr.watch = nil, nil, nil, nil, nil
	pr.finished, pr.abandoned, pr.expired, pr.truncated, pr.sent, pr.bodyErr = false, false, false, false, false, nil
	pr.readsOver = false
	pr.refusal = refusal{}
	pr.thread, pr.queued, pr.status = -1, 0, 0
	requests.mu.Lock()
	requests.free = append(requests.free, pr)
	requests.mu.Unlock()
}

func (pr *phpRequest) logger() *zap.Logger {
	// PHP's own lines (errors, error_log()) log under php_worker, like the rest of
	// what PHP does, with the request they belong to.
	if pr.site.Name != "" {
		return pr.site.Runtime.Logger().With(zap.String("server", pr.site.Name), zap.String("uri", pr.uri))
	}
	return pr.site.Runtime.Logger().With(zap.String("uri", pr.uri))
}

// respond queues response data for the handler goroutine (it never waits on the
// client), or with response buffering off writes it to the client at once; false when
// the client is gone.
//
// Only a PHP thread's own call (core.OnPHPThread) ever writes to the client: the
// goroutines that deliver the data of many requests must not wait on one slow client.
// The completions' goroutine keeps what it delivers in memory (a completion is small,
// and a slow disk must not hold up the others); a child process's read loop delivers
// responses of any size, so their bodies keep to the memory bounds and spill past them,
// whatever the policy: with buffering off, a child's PHP thread cannot be made to wait
// on the client instead.
func (pr *phpRequest) respond(resp core.Response, from core.Delivery) bool {
	status, headers, body, flags := resp.Status, resp.Headers, resp.Body, resp.Flags
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if resp.Thread >= 0 {
		pr.thread, pr.queued = resp.Thread, resp.Queued
		if pr.status == 0 && status >= 200 {
			pr.status = status
		}
	}
	if flags&core.ResponseExpired != 0 {
		// From the core's watchdog: the handler answers the client (504, or cuts the
		// response off) and nothing PHP sends later reaches it.
		pr.expired = true
		pr.signal()
		return true
	}
	ok := !pr.abandoned && !pr.expired && !pr.truncated
	if flags&core.ResponseRefused != 0 {
		// The core hands the request back (its DONE): the handler writes the answer.
		if ok {
			pr.refusal = refusal{code: resp.Refusal, retryAfter: resp.RetryAfter}
		}
		pr.finished = true
		pr.signal()
		return ok
	}
	if ok && flags&core.ResponseInformational != 0 {
		h := make(http.Header, len(headers))
		addHeaders(pr, h, headers)
		pr.out.parts = append(pr.out.parts, responsePart{kind: partInformational, status: status, header: h})
	} else {
		if ok && status != 0 {
			if status < 100 || status > 999 {
				pr.logger().Warn("PHP set an invalid HTTP status; sending 500", zap.Int("status", status))
				status = http.StatusInternalServerError
			}
			h := make(http.Header, len(headers))
			addHeaders(pr, h, headers)
			pr.out.parts = append(pr.out.parts, responsePart{kind: partHeader, status: status, header: h})
		}
		if ok && len(body) > 0 {
			if pr.out.Off && from == core.OnPHPThread {
				// Written below, before the core reuses its bytes.
				pr.out.parts = append(pr.out.parts, responsePart{kind: partBody, data: body})
			} else if pr.out.Off && from == core.FromCompletions {
				// For the handler goroutine to write; the core frees its bytes after this.
				pr.out.parts = append(pr.out.parts, responsePart{kind: partBody, data: bytes.Clone(body)})
			} else if err := pr.out.queueBody(body, from == core.FromCompletions); err != nil {
				// The rest of the response is lost: the handler answers 500, or cuts the
				// response off, and PHP is told the client is gone.
				pr.logger().Error("cannot buffer the response (memory bound reached and the spill file failed)", zap.Error(err))
				pr.truncated = true
				ok = false
			}
		}
		if ok && flags&core.ResponseFlush != 0 {
			pr.out.parts = append(pr.out.parts, responsePart{kind: partFlush})
		}
	}
	if ok && pr.out.Off && from == core.OnPHPThread {
		parts := pr.out.take()
		err := writeParts(pr.w, nil, parts)
		pr.markSent(parts)
		if err != nil {
			pr.logger().Debug("client went away while PHP was writing", zap.Error(err))
			ok = false
		}
	}
	if flags&core.ResponseDone != 0 {
		pr.finished = true
	}
	pr.signal()
	return ok
}

// errExpired ends the sending of a response whose request ran past its deadline.
var errExpired = errors.New("php_worker: the request ran past its time limit")

// errTruncated ends the sending of a response part of which could not be buffered.
var errTruncated = errors.New("php_worker: part of the response could not be buffered")

// errRefused ends the waiting for a response the core will not produce.
var errRefused = errors.New("php_worker: the core handed the request back")

// refusal is why the core did not serve a request (a PHP_WORKER_REFUSED_* code), and
// for a worker that cannot boot, when it tries again.
type refusal struct {
	code       uint32
	retryAfter time.Duration
}

// markSent notes whether parts that left carried the headers. The caller holds mu.
func (pr *phpRequest) markSent(parts []responsePart) {
	for _, p := range parts {
		pr.sent = pr.sent || p.kind == partHeader
	}
}

// signal wakes the handler goroutine; it takes everything queued when it wakes.
func (pr *phpRequest) signal() {
	select {
	case pr.wake <- struct{}{}:
	default:
	}
}

// send writes what is queued to the client, until the queue is empty: true once the
// core's DONE came and everything before it left. An error is the client's.
func (pr *phpRequest) send() (bool, error) {
	for {
		pr.mu.Lock()
		if pr.expired {
			pr.mu.Unlock()
			return true, errExpired
		}
		if pr.refusal.code != 0 {
			pr.mu.Unlock()
			return true, errRefused
		}
		if pr.truncated {
			pr.mu.Unlock()
			return true, errTruncated
		}
		parts, spill, finished := pr.out.take(), pr.out.spill, pr.finished
		pr.mu.Unlock()
		if len(parts) == 0 {
			return finished, nil
		}
		// spill may be nil: then no part is in it.
		err := writeParts(pr.w, spill, parts)
		pr.mu.Lock()
		pr.out.released(parts)
		pr.markSent(parts)
		pr.mu.Unlock()
		if err != nil {
			return true, err
		}
	}
}

// closeOutput drops what is still queued and the spill file: the response is over.
func (pr *phpRequest) closeOutput() {
	pr.mu.Lock()
	pr.out.reset()
	pr.mu.Unlock()
}

// readBody fills buf from the request body; the count (short only at the end), or -1.
//
// A body read ahead is the request's own: PHP may read it whatever became of the
// client (a webhook whose sender hung up while its request waited still gets its
// payload). Only the client's bytes are off limits once the handler stopped waiting
// (abandoned) or returned (readsOver): a read that would wait on them fails.
func (pr *phpRequest) readBody(buf []byte) int {
	pr.readMu.Lock()
	defer pr.readMu.Unlock()
	pr.mu.Lock()
	clientGone := pr.abandoned || pr.readsOver
	if pr.expired || pr.bodyErr != nil || (clientGone && pr.body == nil) {
		pr.mu.Unlock()
		return -1
	}
	body, r := pr.body, pr.r
	pr.mu.Unlock()
	var n int
	var err error
	switch {
	case body == nil:
		n, err = readBody(r.Body, buf)
	case clientGone:
		// The bytes read ahead; past them, a body longer than the read-ahead limit
		// cannot be read whole any more.
		n, err = body.readAhead(buf)
		if err == nil && n < len(buf) && !body.complete() {
			err = errBodyAbandoned
		}
	default:
		n, err = body.read(buf)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err != nil {
		pr.bodyErr = err
		pr.logger().Warn("reading the request body failed", zap.Error(err))
		if n == 0 {
			return -1
		}
	}
	return n
}

// errBodyAbandoned is why the rest of a body could not be read: its client left, or the
// handler stopped waiting for it.
var errBodyAbandoned = errors.New("the client left before its whole body was read")

// abandonOrAbort ends the callbacks' use of a response that cannot be sent as PHP made
// it: it returns when nothing left yet (the caller answers the error), and cuts the
// connection off when the headers already left, so the client sees it incomplete.
func (pr *phpRequest) abandonOrAbort() {
	pr.mu.Lock()
	pr.markAbandoned()
	sent := pr.sent
	pr.mu.Unlock()
	if sent {
		panic(http.ErrAbortHandler)
	}
}

// endReads ends the PHP thread's reading of the client's body before the handler
// returns: a read waiting on the client is cut short (the connection's read deadline,
// through the body's idle timeout when it has one, so that no read arms it again), and
// later ones fail at once.
func (pr *phpRequest) endReads(w http.ResponseWriter) {
	pr.mu.Lock()
	pr.readsOver = true
	pr.mu.Unlock()
	if pr.readMu.TryLock() {
		pr.readMu.Unlock()
		return
	}
	if pr.watch != nil {
		pr.watch.cut()
	} else {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	pr.readMu.Lock()
	pr.readMu.Unlock()
}

// abandon stops the callbacks from touching the response (the request's context is
// done) of a request that already runs (one still queued is withdrawn instead): its
// script sees connection_aborted(), as under php-fpm and FrankenPHP. True when the body
// stopped arriving before any response left: the client is still there and gets a 408.
func (pr *phpRequest) abandon() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.markAbandoned()
	// Caddy's read timeout (timeouts read_body): the client is still there.
	timedOut := pr.bodyErr != nil && bodyErrorStatus(pr.bodyErr) == http.StatusRequestTimeout
	return timedOut && !pr.sent
}

// markAbandoned stops the callbacks from touching the response and tells the core the
// client left, so a script's fastcgi_finish_request() knows without a callback asking.
// pr.mu held.
func (pr *phpRequest) markAbandoned() {
	if !pr.abandoned && !pr.finished && pr.core != nil {
		pr.core.ClientGone()
	}
	pr.abandoned = true
}

// resubmit hands a request that a PHP process refused without running it (its worker
// cannot boot there, its queue is full) to another process (processes above 1), which
// may serve it; b is the request as submitted. True when another took it: the request
// is under way again, and its refusal forgotten. False leaves the refusal to answer.
func (pr *phpRequest) resubmit(b *core.RequestBuffer) bool {
	pr.mu.Lock()
	why := pr.refusal
	again, ok := pr.core.(resubmitter)
	if !ok || pr.sent || pr.abandoned || pr.expired || pr.truncated ||
		(why.code != core.RefusedBootFailing && why.code != core.RefusedQueueFull) {
		pr.mu.Unlock()
		return false
	}
	// The refusal was the core's DONE, which drops (or dropped) its reference: the new
	// submission is owned again, until its own DONE.
	pr.refusal, pr.finished = refusal{}, false
	pr.refs.Add(1)
	pr.mu.Unlock()
	if again.Resubmit(b, why.code, why.retryAfter) {
		return true
	}
	pr.mu.Lock()
	pr.refusal, pr.finished = why, true
	pr.mu.Unlock()
	pr.release()
	return false
}

// withdraw cancels the request if it still waits for a PHP thread; true when it will
// not run, and the caller answers the client.
func (pr *phpRequest) withdraw() bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.finished || !pr.core.Cancel() {
		return false
	}
	pr.abandoned = true
	return true
}
