// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The child's side: a process the Caddy process exec'd (the same binary, its
// php-worker-child command) with the wire on descriptor 3. It runs one engine, as the
// Caddy process does in a single process, and is its core.Host: responses, body reads
// and log lines go back over the wire. It ends when the wire does.

// childFD is the descriptor of the wire in a child.
const childFD = 3

// RunChild serves the engine of a child process until the Caddy process closes the
// wire or goes away; it returns the process's exit status.
func RunChild() int {
	// First, before PHP can start a program: the exec that made this process cleared
	// close-on-exec on the wire and the taken table. A program a script starts (exec,
	// proc_open) holding the wire would keep it open past this process's death.
	syscall.CloseOnExec(childFD)
	syscall.CloseOnExec(takenFD)
	// The child's life is the wire's: the signals that stop a server (`pkill php_worker`
	// reaches the children too) leave it to the Caddy process, which drains and ends it.
	// Caught and dropped rather than ignored, since an ignored signal stays ignored in
	// the programs PHP starts; SIGQUIT too, whose Go default would dump and exit.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess()
	// Non-blocking, so the wire's reads and writes wait in Go's poller, not on threads.
	if err := syscall.SetNonblock(childFD, true); err != nil {
		fmt.Fprintln(os.Stderr, "php-worker-child: no wire on descriptor 3; this command is run by php_worker itself")
		return 2
	}
	f := os.NewFile(childFD, "php_worker wire")
	if f == nil {
		fmt.Fprintln(os.Stderr, "php-worker-child: no wire on descriptor 3; this command is run by php_worker itself")
		return 2
	}
	taken, err := mapTaken(takenFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "php-worker-child:", err)
		return 2
	}
	c := &child{link: newLink(f), taken: taken, requests: map[uint64]*childRequest{}, stores: map[uint64]chan []byte{}}
	core.SetHost(c)
	err = c.serve(newReader(f))
	if e := c.engine.Load(); e != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "php-worker-child: the wire failed:", err)
	}
	// The Caddy process is gone or done with this child: nobody is left to answer, so
	// nothing waits for running scripts.
	return 0
}

type child struct {
	link   *link
	taken  *takenTable // where its PHP threads mark the requests they take
	engine atomic.Pointer[core.Engine]
	debug  atomic.Bool // the Caddy process logs debug lines

	mu       sync.Mutex
	requests map[uint64]*childRequest
	// The shared table operations waiting for the Caddy process's reply, by id.
	stores    map[uint64]chan []byte
	nextStore uint64
}

// childRequest is a request the child's engine holds, by its handle (the Caddy
// process's).
type childRequest struct {
	mu   sync.Mutex
	slot uint32 // in the taken table
	req  core.Submitted
	done bool // its last response call was made: req is freed
	gone atomic.Bool
	body chan []byte // a body read's answer; nil bytes: unreadable
}

func (c *child) serve(r *reader) error {
	var b core.RequestBuffer
	for {
		kind, id, p, err := r.next()
		if err != nil {
			return err
		}
		switch kind {
		case kindSubmit:
			c.submit(id, p, &b)
		case kindCancel:
			withdrawn := byte(0)
			if cr := c.lookup(id); cr != nil {
				cr.mu.Lock()
				if !cr.done && cr.req != nil && cr.req.Cancel() {
					withdrawn = 1
				}
				cr.mu.Unlock()
			}
			c.link.post(kindCancelled, id, []byte{withdrawn})
		case kindBody:
			if cr := c.lookup(id); cr != nil && len(p) >= 8 {
				var chunk []byte
				if int64(binary.LittleEndian.Uint64(p)) >= 0 {
					chunk = append(make([]byte, 0, len(p)-8+1), p[8:]...)
				}
				cr.body <- chunk
			}
		case kindStoreReply:
			c.mu.Lock()
			ch := c.stores[id]
			delete(c.stores, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- append([]byte(nil), p...)
			}
		case kindClientGone:
			if cr := c.lookup(id); cr != nil {
				cr.gone.Store(true)
				cr.mu.Lock()
				if !cr.done && cr.req != nil {
					cr.req.ClientGone()
				}
				cr.mu.Unlock()
			}
		case kindCall:
			call := append([]byte(nil), p...)
			go c.call(id, call)
		default:
			return fmt.Errorf("unknown frame kind %d", kind)
		}
	}
}

func (c *child) lookup(handle uint64) *childRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[handle]
}

func (c *child) forget(handle uint64) {
	c.mu.Lock()
	delete(c.requests, handle)
	c.mu.Unlock()
}

// submit hands a request to the engine. Its state exists before the core has it: a
// PHP thread may answer it before Submit returns.
func (c *child) submit(handle uint64, p []byte, b *core.RequestBuffer) {
	e := c.engine.Load()
	pool, flags, err := unpackSubmit(p, b)
	rc := core.ErrInvalid
	if e == nil {
		rc = core.ErrStopped
	}
	if err == nil && e != nil {
		cr := &childRequest{body: make(chan []byte, 1), slot: submitSlot(p)}
		c.mu.Lock()
		c.requests[handle] = cr
		c.mu.Unlock()
		cr.mu.Lock()
		cr.req, rc = e.SubmitMarked(pool, b, flags, uintptr(handle), c.taken.word(cr.slot))
		cr.mu.Unlock()
		if rc == core.OK {
			return
		}
		c.forget(handle)
	}
	var code [4]byte
	binary.LittleEndian.PutUint32(code[:], uint32(rc))
	c.link.post(kindSubmitFailed, handle, code[:])
}

// Respond sends response data to the Caddy process, which never waits on the client
// for it; false once the Caddy process said the client is gone.
func (c *child) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	cr := c.lookup(uint64(handle))
	if resp.Flags&core.ResponseDone != 0 && cr != nil {
		cr.mu.Lock()
		cr.done = true
		cr.mu.Unlock()
		c.forget(uint64(handle))
	}
	// One PHP write can be any size (readfile() writes a whole file at once): the body
	// crosses in pieces, each queued behind the link's bound on what waits for the
	// writer, so this PHP thread goes at the wire's pace and no frame is past maxFrame.
	// The status, the headers and the thread go with the first piece, the flags (DONE,
	// a flush) with the last.
	for len(resp.Body) > respondPiece {
		first := resp
		first.Body, first.Flags = resp.Body[:respondPiece], 0
		if !c.link.sendWith(kindRespond, uint64(handle), true, func(dst []byte) []byte { return packRespond(dst, &first) }) {
			return c.respondRefused(handle, resp)
		}
		resp.Status, resp.Headers, resp.Thread, resp.Queued = 0, nil, -1, 0
		resp.Body = resp.Body[respondPiece:]
		if cr != nil && cr.gone.Load() {
			resp.Body = nil // nobody reads the rest; the flags still go
		}
	}
	if !c.link.sendWith(kindRespond, uint64(handle), true, func(dst []byte) []byte { return packRespond(dst, &resp) }) {
		return c.respondRefused(handle, resp)
	}
	return cr == nil || !cr.gone.Load()
}

// respondPiece is the largest body a response frame carries.
const respondPiece = 1 << 20

// respondRefused handles a response frame the link did not take: false when the link is
// closed (the Caddy process answers for a child it lost). Otherwise the frame was past
// maxFrame, which only headers of tens of MiB can make: the request still ends, as a
// 500 if nothing left yet.
func (c *child) respondRefused(handle uintptr, resp core.Response) bool {
	if c.link.isClosed() {
		return false
	}
	c.Logger(handle).Error("a response part is too large to cross to the Caddy process; the response ends here",
		zap.Int("headers", len(resp.Headers)), zap.Int("limit", maxFrame))
	end := core.Response{Flags: resp.Flags & core.ResponseDone, Thread: -1}
	if resp.Status != 0 {
		end.Status = 500
	}
	c.link.sendWith(kindRespond, uint64(handle), true, func(dst []byte) []byte { return packRespond(dst, &end) })
	return false
}

// ReadBody asks the Caddy process for body bytes and waits for them.
func (c *child) ReadBody(handle uintptr, buf []byte) int {
	cr := c.lookup(uint64(handle))
	if cr == nil {
		return -1
	}
	var want [4]byte
	// The answer carries an 8-byte count before the bytes.
	binary.LittleEndian.PutUint32(want[:], uint32(min(len(buf), maxFrame-8)))
	if !c.link.send(kindReadBody, uint64(handle), want[:]) {
		return -1
	}
	chunk := <-cr.body
	if chunk == nil {
		return -1
	}
	return copy(buf, chunk)
}

// SharedStore runs a shared table operation in the Caddy process, which keeps the one
// table of every child, and waits for its reply (on a PHP thread: the table answers
// at once, from memory).
func (c *child) SharedStore(request []byte) ([]byte, bool) {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.nextStore++
	id := c.nextStore
	c.stores[id] = ch
	c.mu.Unlock()
	if len(request) > maxFrame {
		// One frame carries the operation; in one process the table takes values up to
		// its capacity, here up to the wire's frame.
		c.Logger(0).Warn("a shared table value is too large to cross to the Caddy process; the write fails",
			zap.Int("bytes", len(request)), zap.Int("limit", maxFrame))
	}
	if len(request) > maxFrame || !c.link.send(kindStore, id, request) {
		c.mu.Lock()
		delete(c.stores, id)
		c.mu.Unlock()
		return nil, false
	}
	reply, ok := <-ch
	return reply, ok && reply != nil
}

// Logger forwards the engine's log lines to the Caddy process's log.
func (c *child) Logger(handle uintptr) *zap.Logger {
	return zap.New(&forwardCore{c: c, handle: uint64(handle)})
}

var _ core.SharedStoreHost = (*child)(nil)

// forwardCore is a zap core that sends each line over the wire: level, message and
// the fields as a JSON object, which the Caddy process logs as the core's own lines.
type forwardCore struct {
	c      *child
	handle uint64
	fields []zapcore.Field
}

func (f *forwardCore) Enabled(l zapcore.Level) bool {
	return l >= zapcore.InfoLevel || f.c.debug.Load()
}

func (f *forwardCore) With(fields []zapcore.Field) zapcore.Core {
	return &forwardCore{c: f.c, handle: f.handle, fields: append(append([]zapcore.Field(nil), f.fields...), fields...)}
}

func (f *forwardCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.Enabled(e.Level) {
		return ce.AddCore(e, f)
	}
	return ce
}

func (f *forwardCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, fl := range append(f.fields, fields...) {
		fl.AddTo(enc)
	}
	raw, err := json.Marshal(enc.Fields)
	if err != nil || len(raw) > maxLogPart {
		raw = nil
	}
	f.c.link.send(kindLog, f.handle, packLog(int8(e.Level), cutLogMessage(e.Message), raw))
	return nil
}

// maxLogPart bounds a forwarded line's message, and its fields, which are dropped past
// it: a line of megabytes (error_log() of a whole payload) helps no log reader, and a
// line must fit one frame of the wire.
const maxLogPart = 1 << 20

// cutLogMessage cuts a message past maxLogPart at a character's start, and says how
// much was cut.
func cutLogMessage(msg string) string {
	if len(msg) <= maxLogPart {
		return msg
	}
	end := maxLogPart
	for end > 0 && !utf8.RuneStart(msg[end]) {
		end--
	}
	return fmt.Sprintf("%s… [%d bytes cut]", msg[:end], len(msg)-end)
}

func (f *forwardCore) Sync() error { return nil }

// packLog is a log line's payload: level, message length, message, fields.
func packLog(level int8, msg string, fields []byte) []byte {
	out := make([]byte, 5, 5+len(msg)+len(fields))
	out[0] = byte(level)
	binary.LittleEndian.PutUint32(out[1:], uint32(len(msg)))
	out = append(out, msg...)
	return append(out, fields...)
}

func unpackLog(p []byte) (zapcore.Level, string, []byte, error) {
	if len(p) < 5 {
		return 0, "", nil, errShort
	}
	n := int(binary.LittleEndian.Uint32(p[1:]))
	if len(p) < 5+n {
		return 0, "", nil, errShort
	}
	return zapcore.Level(int8(p[0])), string(p[5 : 5+n]), p[5+n:], nil
}

// call is a control call from the Caddy process (calls.go names them).
type call struct {
	Op         string          `json:"op"`
	Settings   json.RawMessage `json:"settings,omitempty"`
	Pool       uint32          `json:"pool,omitempty"`
	Spec       json.RawMessage `json:"spec,omitempty"`
	Generation uint32          `json:"generation,omitempty"`
	Activate   bool            `json:"activate,omitempty"`
	N          int             `json:"n,omitempty"`
	Shared     int64           `json:"shared,omitempty"`
	Local      int64           `json:"local,omitempty"`
	MS         int64           `json:"ms,omitempty"`
	CPU        bool            `json:"cpu,omitempty"`
	Debug      bool            `json:"debug,omitempty"`
	// Build is the Caddy process's build (buildID), with a start.
	Build string `json:"build,omitempty"`
}

type reply struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

func (c *child) call(id uint64, raw []byte) {
	var req call
	var result any
	err := json.Unmarshal(raw, &req)
	if err == nil {
		result, err = c.run(&req)
	}
	var rep reply
	if err != nil {
		rep.Error = err.Error()
	} else if raw, ok := result.([]byte); ok {
		rep.Result = raw
	} else if result != nil {
		rep.Result, _ = json.Marshal(result)
	}
	out, _ := json.Marshal(rep)
	if len(out) > maxFrame {
		out, _ = json.Marshal(reply{Error: fmt.Sprintf("the %s reply is %d bytes, past the %d bytes a PHP process can send back",
			req.Op, len(out), maxFrame)})
	}
	c.link.send(kindReply, id, out)
}

var errNoEngine = errors.New("PHP is not running in this process")

func (c *child) run(req *call) (any, error) {
	if req.Op == opPing {
		return nil, nil // from the call's goroutine: it answers while every PHP thread is busy
	}
	if req.Op == opStart {
		if c.engine.Load() != nil {
			return nil, errors.New("PHP runs already")
		}
		if own := buildID(); req.Build != own {
			return nil, fmt.Errorf("this PHP process is build %q of php_worker, not the Caddy process's %q: "+
				"the binary was replaced since the server started (an upgrade?); restart the server", own, req.Build)
		}
		c.debug.Store(req.Debug)
		core.ConfigureStores(req.Shared, req.Local)
		e, err := core.NewEngine(req.Settings)
		if err != nil {
			return nil, err
		}
		c.engine.Store(e)
		return map[string]any{"pid": os.Getpid()}, nil
	}
	e := c.engine.Load()
	if e == nil {
		return nil, errNoEngine
	}
	switch req.Op {
	case opStores:
		core.ConfigureStores(req.Shared, req.Local)
		return nil, nil
	case opNewPool:
		return nil, e.NewPool(req.Pool, req.Spec)
	case opResizeClassic:
		return nil, e.ResizeClassic(req.N)
	case opAutoscale:
		return nil, e.Autoscale(req.N, time.Duration(req.MS)*time.Millisecond)
	case opDeadlines:
		return nil, e.SetDeadlines(time.Duration(req.MS)*time.Millisecond, req.N)
	case opRestartPool:
		spec := []byte(req.Spec)
		if len(spec) == 0 {
			spec = nil
		}
		g, err := e.RestartPool(req.Pool, spec, req.Activate)
		return g, err
	case opActivatePool:
		return nil, e.ActivatePool(req.Pool, req.Generation)
	case opDiscardPool:
		return nil, e.DiscardPool(req.Pool, req.Generation)
	case opDeletePool:
		if err := e.DeletePool(req.Pool); err != nil || req.MS <= 0 {
			return nil, err
		}
		return nil, waitPoolEnded(e, req.Pool, time.Duration(req.MS)*time.Millisecond)
	case opStats:
		return e.StatsJSON()
	case opWaiting:
		return e.PoolWaiting(req.Pool), nil
	case opProfileStart:
		return nil, e.ProfileStart(req.N, req.CPU)
	case opProfileStop:
		return e.ProfileStop()
	case opRunJob:
		return e.RunJob(req.Spec)
	case opShutdown:
		e.Shutdown(time.Duration(req.MS) * time.Millisecond)
		c.engine.Store(nil)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown call %q", req.Op)
}

// waitPoolEnded waits until no thread of a deleted pool runs (the engine's delete does
// not wait for them), up to d.
func waitPoolEnded(e *core.Engine, pool uint32, d time.Duration) error {
	type thread struct {
		Pool *uint32 `json:"pool"`
	}
	ofPool := func(t thread) bool { return t.Pool != nil && *t.Pool == pool }
	deadline := time.Now().Add(d)
	for {
		raw, err := e.StatsJSON()
		if err != nil {
			return err
		}
		var s struct {
			Threads []thread `json:"threads"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		if !slices.ContainsFunc(s.Threads, ofPool) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the threads of worker pool %d still run %s after it was deleted", pool, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The control calls.
const (
	opStart         = "start"
	opStores        = "stores"
	opNewPool       = "new_pool"
	opResizeClassic = "resize_classic"
	opAutoscale     = "autoscale"
	opDeadlines     = "deadlines"
	opRestartPool   = "restart_pool"
	opActivatePool  = "activate_pool"
	opDiscardPool   = "discard_pool"
	opDeletePool    = "delete_pool"
	opStats         = "stats"
	opWaiting       = "waiting"
	opProfileStart  = "profile_start"
	opProfileStop   = "profile_stop"
	opRunJob        = "run_job"
	opShutdown      = "shutdown"
	opPing          = "ping"
)
