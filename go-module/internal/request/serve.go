// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package request runs one HTTP request on PHP: it resolves the script, writes the CGI
// variables, reads the body ahead, hands the request to a PHP thread through the
// runtime, and sends the response back as the core's callbacks deliver it.
package request

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
)

// engineWait bounds how long a request waits for PHP to start, for a php_ini change to
// restart it, or for its worker's config to start.
const engineWait = 30 * time.Second

// DefaultRequestBodyTimeout is how long a request body may stay idle by default
// (FrankenPHP's request_body_timeout).
const DefaultRequestBodyTimeout = 60 * time.Second

// Site is what one site's handler serves PHP requests with, fixed when it provisions.
type Site struct {
	Name    string // the site's name (FrankenPHP's php_server name), "" for none
	Runtime *phpruntime.Runtime
	Logger  *zap.Logger
	// How request bodies wait for PHP (body.go), and responses for the client
	// (response.go).
	RequestBuffer, ResponseBuffer BufferPolicy
	// max_wait_time: how long a request may wait while no thread of its pool is free
	// (0: no limit).
	MaxWaitTime time.Duration
	// How long a body may stay idle, no byte arriving (0: no limit).
	BodyIdleTimeout time.Duration
}

// Route is where a request goes: the classic pool (Pool nil) or a worker's pool.
type Route struct {
	Pool *phpruntime.Pool
	Name string // the worker's name, for answers
	// The script is the worker Name's, run for this request alone in a request of its
	// own on the classic pool (for a debugger or profiler; see the root's debug.go).
	OneShot bool
	// The env lists after the request's own variables, later ones winning: a worker's
	// env, then the site's (nil for either when absent).
	WorkerEnv, SiteEnv [][2]string
}

// Serve hands the request for script s to a PHP thread of route's pool and sends its
// response.
func (site *Site) Serve(w http.ResponseWriter, r *http.Request, s Script, repl *caddy.Replacer, route Route) (err error) {
	tr := startTrace(r, s, route)
	if tr != nil {
		defer func() { tr.end(err) }()
	}
	site.WatchBody(w, r)
	body, err := site.bufferAhead(r)
	if err != nil {
		return err
	}
	b := core.GetRequestBuffer()
	if body != nil && body.complete() {
		b.ContentLength = body.size
	} else {
		b.ContentLength = r.ContentLength
	}
	BuildRequest(b, r, s, repl, route.WorkerEnv, route.SiteEnv)
	body, travels, err := appendSmallBody(b, r, body)
	if err != nil {
		core.PutRequestBuffer(b)
		return err
	}
	flags := uint32(0)
	if travels {
		flags |= core.RequestBodyComplete
	}
	if route.OneShot {
		flags |= core.RequestOneShotWorker
	}
	pr := acquireRequest(site, w, r)
	if pr == nil {
		core.PutRequestBuffer(b)
		if body != nil {
			body.close()
		}
		return site.unavailable(w, "too many requests in flight", time.Second)
	}
	pr.body = body // closed with the request
	pr.watch = watchOf(r.Body)
	defer pr.release() // the handler's reference
	defer tr.observe(pr)
	req, rc, submitted := site.Runtime.Submit(r.Context(), engineWait, route.Pool, b, flags, pr.handle)
	again := b
	if _, ok := req.(resubmitter); ok && rc == core.OK {
		defer core.PutRequestBuffer(b) // kept for a resubmission (resubmit)
	} else {
		core.PutRequestBuffer(b)
		again = nil
	}
	tr.submitted(submitted)
	if rc != core.OK {
		pr.release() // the core never got it
		return site.notSubmitted(w, rc, route, tr)
	}
	pr.mu.Lock()
	pr.core = req
	pr.mu.Unlock()
	defer pr.closeOutput()
	defer pr.endReads(w)
	return site.await(w, r, pr, route, tr, again)
}

// WatchBody puts the site's request_body_timeout on r's body, once; call it before
// anything reads the body (Serve does, if the caller has not).
func (site *Site) WatchBody(w http.ResponseWriter, r *http.Request) {
	if watchOf(r.Body) == nil {
		WatchBody(w, r, site.BodyIdleTimeout)
	}
}

// bufferAhead reads a body larger than readAheadBody before the request goes to PHP,
// whole when buffering is on (body.go), so no PHP thread waits on it; nil when PHP
// streams it from the client, or when it is small (appendSmallBody). A body PHP would
// refuse (past post_max_size) is not read ahead: PHP refuses it without reading it, as
// it always did.
func (site *Site) bufferAhead(r *http.Request) (*requestBody, error) {
	limit := site.Runtime.PostMaxSize()
	policy := site.RequestBuffer
	if policy.Off || r.Body == nil || r.Body == http.NoBody || (r.ContentLength >= 0 && r.ContentLength <= readAheadBody) ||
		(limit > 0 && r.ContentLength > limit) {
		return nil, nil
	}
	body, err := bufferBody(r.Body, policy, limit)
	if err != nil {
		return nil, bodyError(err)
	}
	if r.ContentLength >= 0 && body.size != r.ContentLength {
		body.close()
		return nil, bodyError(io.ErrUnexpectedEOF)
	}
	return body, nil
}

// appendSmallBody puts a body of at most readAheadBody at the end of b, where it
// travels with the request: one with a small Content-Length, read now, or a chunked one
// read ahead that turned out small (closed then). It returns the body PHP still reads
// through the read_body callback, if any, and whether the whole body travels in b.
func appendSmallBody(b *core.RequestBuffer, r *http.Request, body *requestBody) (*requestBody, bool, error) {
	switch {
	case body != nil && body.complete() && body.size <= readAheadBody:
		start := len(b.Strings)
		b.Strings = append(b.Strings, make([]byte, body.size)...)
		err := body.copyTo(b.Strings[start:])
		body.close()
		if err != nil {
			return nil, false, caddyhttp.Error(http.StatusInternalServerError, err)
		}
		b.BodyLen = len(b.Strings) - start
		return nil, true, nil
	case body == nil && r.ContentLength >= 0 && r.ContentLength <= readAheadBody:
		start := len(b.Strings)
		b.Strings = append(b.Strings, make([]byte, r.ContentLength)...)
		n, err := readBody(r.Body, b.Strings[start:])
		if err == nil && int64(n) < r.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, false, bodyError(err)
		}
		b.Strings = b.Strings[:start+n]
		b.BodyLen = n
		return nil, true, nil
	}
	return body, false, nil
}

// notSubmitted answers a request the core did not take.
func (site *Site) notSubmitted(w http.ResponseWriter, rc core.Code, route Route, tr *requestTrace) error {
	switch rc {
	case core.ErrQueueFull:
		tr.fail("all PHP threads are busy and the queue is full")
		return site.unavailable(w, "all PHP threads are busy and the queue is full", time.Second)
	case core.ErrStopped:
		tr.fail("PHP is not running")
		return site.unavailable(w, "PHP is not running", time.Second)
	case core.ErrUnknownPool:
		tr.fail("worker removed")
		return site.unavailable(w, "worker "+route.Name+" was removed by a config change", time.Second)
	}
	return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("php_worker: submitting the request failed (code %d)", rc))
}

// await sends the response of a submitted request as the core delivers it, until its
// end; it answers the client itself when the request cannot be served as PHP made it
// (a deadline, a refusal, max_wait_time, a body that stopped arriving). b is the request
// as submitted when a refusal may hand it to another PHP process (resubmit), else nil.
func (site *Site) await(w http.ResponseWriter, r *http.Request, pr *phpRequest, route Route, tr *requestTrace,
	b *core.RequestBuffer) error {
	var timeout <-chan time.Time
	var retry *time.Timer
	if wait := site.MaxWaitTime; wait > 0 {
		retry = time.NewTimer(wait)
		defer retry.Stop()
		timeout = retry.C
	}
	for {
		select {
		case <-pr.wake:
			end, err := pr.send()
			switch {
			case errors.Is(err, errExpired):
				tr.fail("the request ran past its time limit")
				return site.expired(w, pr)
			case errors.Is(err, errRefused) && b != nil && pr.resubmit(b):
				// Another PHP process has it now.
			case errors.Is(err, errRefused):
				tr.fail("the core handed the request back unserved")
				return site.refused(w, pr, route)
			case errors.Is(err, errTruncated):
				tr.fail("part of the response could not be buffered")
				return site.truncated(w, pr)
			case err != nil:
				// The PHP thread has moved on, or will at its next output: only this
				// goroutine waited on the client (timeouts write bounds that wait).
				pr.abandon()
				site.Logger.Info("client stopped reading the response; it is dropped", zap.String("uri", r.RequestURI),
					zap.Error(err))
				return nil
			case end:
				return nil
			}
		case <-r.Context().Done():
			// A request still waiting for a PHP thread is withdrawn: nobody is there to
			// read its answer, and a queue that runs what its senders abandoned lets
			// anyone multiply the server's load for the price of opening a connection.
			if pr.withdraw() {
				withdrawnClientGone.Add(1)
				tr.fail("the client left while the request waited for a PHP thread")
				site.Logger.Info("client left while the request waited for a PHP thread; withdrawn, its script does not run",
					zap.String("method", r.Method), zap.String("uri", r.RequestURI), zap.String("worker", route.Name))
				return nil
			}
			// A read of the body in progress ends first: its error says whether the body
			// stopped arriving (a 408) or the client left.
			pr.endReads(w)
			if pr.abandon() {
				return caddyhttp.Error(http.StatusRequestTimeout, errors.New("php_worker: the request body stopped arriving"))
			}
			return nil
		case <-timeout:
			timeout = nil
			if site.freeThreads(pr, route) > 0 {
				// A thread that can take it is free: the request is on its way to it,
				// and max_wait_time counts only the time no such thread was free.
				retry.Reset(site.MaxWaitTime)
				timeout = retry.C
				continue
			}
			if pr.withdraw() {
				withdrawnMaxWait.Add(1)
				tr.fail("no PHP thread became free within max_wait_time")
				return site.unavailable(w, "no PHP thread became free within max_wait_time", time.Second)
			}
			// Already running: max_wait_time only bounds the wait for a thread.
		}
	}
}

// resubmitter is a submitted request that a PHP process refused without running it and
// that another may serve: one of internal/cluster's (cluster.Submitted.Resubmit).
type resubmitter interface {
	Resubmit(b *core.RequestBuffer, refusal uint32, retryAfter time.Duration) bool
}

// poolWaiter is a submitted request that tells how many threads of its pool wait for a
// request where it waits itself: one a child process holds (internal/cluster), which only
// that process's threads can take.
type poolWaiter interface {
	PoolWaiting() int
}

// freeThreads is how many PHP threads that could take pr's request wait for one.
func (site *Site) freeThreads(pr *phpRequest, route Route) int {
	pr.mu.Lock()
	submitted := pr.core
	pr.mu.Unlock()
	if w, ok := submitted.(poolWaiter); ok {
		return w.PoolWaiting()
	}
	return site.Runtime.PoolWaiting(route.Pool)
}

// Requests withdrawn before a PHP thread took them, by reason.
var withdrawnClientGone, withdrawnMaxWait atomic.Uint64

// WithdrawnRequests is how many requests were withdrawn from a queue before any script
// ran for them: their client left, or max_wait_time passed.
func WithdrawnRequests() (clientGone, maxWaitTime uint64) {
	return withdrawnClientGone.Load(), withdrawnMaxWait.Load()
}

// bodyError answers a request whose body did not arrive whole (see bodyErrorStatus).
func bodyError(err error) error {
	return caddyhttp.Error(bodyErrorStatus(err), fmt.Errorf("reading the request body: %w", err))
}

// expired answers a request the core gave up on (it ran past its deadline; the core
// logged why): 504 if nothing left yet, else the response is cut off, so the client
// sees it incomplete rather than whole.
func (site *Site) expired(w http.ResponseWriter, pr *phpRequest) error {
	pr.abandonOrAbort()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusGatewayTimeout)
	_, _ = io.WriteString(w, "504 Gateway Timeout: the PHP script ran past its time limit\n")
	return nil
}

// truncated answers a request part of whose response could not be buffered (respond
// logged why): 500 if nothing left yet, else the response is cut off, never framed as
// complete.
func (site *Site) truncated(w http.ResponseWriter, pr *phpRequest) error {
	pr.abandonOrAbort()
	return caddyhttp.Error(http.StatusInternalServerError, errTruncated)
}

// refused answers a request the core handed back without serving it, for the reason it
// gave: every such answer is written here. A refusal after the headers left (the PHP
// process running the request died in the middle of its response) cuts the response
// off, so the client sees it incomplete rather than whole.
func (site *Site) refused(w http.ResponseWriter, pr *phpRequest, route Route) error {
	pr.mu.Lock()
	why, bodyErr, sent := pr.refusal, pr.bodyErr, pr.sent
	pr.mu.Unlock()
	if why.code == core.RefusedProcessDied {
		// The PHP process running it died (processes above 1): the cluster logged how.
		// Logged here, for a cut-off ends the handler.
		if sent {
			site.Logger.Error("the PHP process running this request died after its response began; cutting it off",
				zap.String("uri", pr.uri))
		} else {
			site.Logger.Error("the PHP process running this request died; answering 502", zap.String("uri", pr.uri))
		}
	}
	pr.abandonOrAbort()
	pool := "the classic PHP threads"
	if route.Pool != nil {
		pool = "worker " + route.Name
	}
	switch why.code {
	case core.RefusedStopped:
		return site.unavailable(w, pool+" stopped", time.Second)
	case core.RefusedBootFailing:
		return site.unavailable(w, pool+" fails to start; the server log says why", why.retryAfter)
	case core.RefusedProcessDied:
		return caddyhttp.Error(http.StatusBadGateway, errors.New("php_worker: the PHP process running the request died"))
	case core.RefusedQueueFull:
		return site.unavailable(w, "all PHP threads are busy and the queue is full", time.Second)
	case core.RefusedBody:
		if bodyErr == nil {
			bodyErr = io.ErrUnexpectedEOF
		}
		// What the script answered was built on part of the body.
		return bodyError(bodyErr)
	}
	site.Logger.Error("the PHP core dropped a request without answering it", zap.Uint32("refusal", why.code),
		zap.String("uri", pr.uri))
	return site.unavailable(w, "the request was lost", time.Second)
}

// unavailable answers 503 with a Retry-After header (whole seconds, at least 1) and a
// body saying why.
func (site *Site) unavailable(w http.ResponseWriter, reason string, retryAfter time.Duration) error {
	site.Logger.Warn("request answered 503", zap.String("reason", reason))
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64((retryAfter+time.Second-1)/time.Second)), 10))
	http.Error(w, "503 Service Unavailable: "+reason, http.StatusServiceUnavailable)
	return nil
}
