// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The child's side: a process the Caddy process exec'd (the same binary, its
// php-worker-child command) with the wire on descriptor 3 and the taken table on 4. It
// runs one engine, as the Caddy process does in a single process. The engine's request
// path is the Rust core's (core.OpenWire): it reads the submissions off the wire and its
// PHP threads write the responses, body reads, log lines and shared table operations,
// so a request costs this process's Go runtime nothing. Go serves the control calls, and
// sends its own log lines. The child ends when the wire does.

// childFD is the descriptor of the wire in a child.
const childFD = 3

// RunChild serves the engine of a child process until the Caddy process closes the
// wire or goes away; it returns the process's exit status.
func RunChild() int {
	// The signals that stop a server (`pkill php_worker` reaches the children too) leave
	// it to the Caddy process, which drains and ends it. Caught and dropped rather than
	// ignored, since an ignored signal stays ignored in the programs PHP starts; SIGQUIT
	// too, whose Go default would dump and exit.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	nameProcess()
	// The core takes both descriptors and makes them close-on-exec (the exec that made
	// this process cleared that flag): a program a script starts never holds the wire.
	w, err := core.OpenWire(childFD, takenFD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "php-worker-child: no wire on descriptors 3 and 4 (this command is run by php_worker itself):", err)
		return 2
	}
	c := &child{wire: w}
	core.SetHost(c)
	for {
		id, raw, err := w.NextCall()
		if err != nil {
			if !errors.Is(err, core.ErrWireEnded) {
				fmt.Fprintln(os.Stderr, "php-worker-child: the wire failed:", err)
			}
			// The Caddy process is gone or done with this child: nobody is left to
			// answer, so nothing waits for running scripts.
			return 0
		}
		go c.call(id, raw)
	}
}

type child struct {
	wire   *core.Wire
	engine atomic.Pointer[core.Engine]
	debug  atomic.Bool // the Caddy process logs debug lines
}

// Respond is never called: the engine answers over the wire.
func (c *child) Respond(uintptr, core.Response, core.Delivery) bool { return false }

// ReadBody is never called: the engine reads bodies over the wire.
func (c *child) ReadBody(uintptr, []byte) int { return -1 }

// Logger forwards the engine's log lines to the Caddy process's log.
func (c *child) Logger(handle uintptr) *zap.Logger {
	return zap.New(&forwardCore{c: c, handle: uint64(handle)})
}

var _ core.Host = (*child)(nil)

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
	f.c.wire.Send(core.WireLog, f.handle, packLog(int8(e.Level), cutLogMessage(e.Message), raw))
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
	Op       string          `json:"op"`
	Settings json.RawMessage `json:"settings,omitempty"`
	// State is the child's share of the cluster's core.State (apply).
	State json.RawMessage `json:"state,omitempty"`
	Pool  uint32          `json:"pool,omitempty"`
	Spec  json.RawMessage `json:"spec,omitempty"`
	N     int             `json:"n,omitempty"`
	MS    int64           `json:"ms,omitempty"`
	CPU   bool            `json:"cpu,omitempty"`
	Debug bool            `json:"debug,omitempty"`
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
	c.wire.Send(core.WireReply, id, out)
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
		c.wire.SetDebug(req.Debug)
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
	case opApply:
		var state core.State
		if err := json.Unmarshal(req.State, &state); err != nil {
			return nil, err
		}
		before := e.Applied()
		if err := e.Apply(state); err != nil || req.MS <= 0 {
			return nil, err
		}
		for _, pl := range before.Pools {
			if state.Pool(pl.ID) == nil {
				if err := waitPoolEnded(e, pl.ID, time.Duration(req.MS)*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
		return nil, nil
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
	opStart        = "start"
	opApply        = "apply"
	opStats        = "stats"
	opWaiting      = "waiting"
	opProfileStart = "profile_start"
	opProfileStop  = "profile_stop"
	opRunJob       = "run_job"
	opShutdown     = "shutdown"
	opPing         = "ping"
)
