// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// settingsChildArg on its command line makes the test binary a child without PHP that
// answers every control call, its snapshot giving the post_max_size of its settings, and
// every request with an empty 200.
const settingsChildArg = "php-worker-test-settings-child"

func TestSettingsChild(t *testing.T) {
	if !slices.Contains(os.Args, settingsChildArg) {
		t.Skip("the cluster's tests run it as a child process")
	}
	f := os.NewFile(childFD, "php_worker wire")
	l := newLink(f)
	r := newReader(f)
	var postMax int64
	for {
		kind, id, payload, err := r.next()
		if err != nil {
			os.Exit(0)
		}
		if kind == kindSubmit {
			l.sendWith(kindRespond, id, true, func(dst []byte) []byte {
				return packRespond(dst, &core.Response{Status: 200, Flags: core.ResponseDone, Thread: 0})
			})
			continue
		}
		if kind != kindCall {
			continue
		}
		var req call
		_ = json.Unmarshal(payload, &req)
		var rep reply
		switch req.Op {
		case opStart:
			var s struct {
				PostMaxSize int64 `json:"post_max_size"`
			}
			_ = json.Unmarshal(req.Settings, &s)
			postMax = s.PostMaxSize
		case opStats:
			rep.Result, _ = json.Marshal(map[string]any{"post_max_size": postMax, "threads": []any{}, "pools": []any{}})
		}
		out, _ := json.Marshal(rep)
		l.send(kindReply, id, out)
	}
}

// discardingHost takes the answers of the requests a test's children held.
type discardingHost struct{}

func (discardingHost) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	return true
}
func (discardingHost) ReadBody(handle uintptr, buf []byte) int { return -1 }
func (discardingHost) Logger(handle uintptr) *zap.Logger       { return zap.NewNop() }

// settingsCluster is a cluster of 2 settings children with post_max_size postMax; the
// count says how many times a child started taking requests.
func settingsCluster(t *testing.T, postMax int64) (*Cluster, *atomic.Int64) {
	previous := core.CurrentHost()
	core.SetHost(discardingHost{})
	installed := new(atomic.Int64)
	settings, _ := json.Marshal(map[string]int64{"post_max_size": postMax})
	c, err := New(Options{Processes: 2, Settings: settings, Installed: func() { installed.Add(1) },
		Command: []string{os.Args[0], "-test.run=^TestSettingsChild$", settingsChildArg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Shutdown(0)
		core.SetHost(previous)
	})
	return c, installed
}

// A php_ini reload rolls the children onto new settings: the post_max_size that decides
// which bodies are read ahead is the new children's.
func TestPostMaxSizeFollowsARoll(t *testing.T) {
	c, _ := settingsCluster(t, 1<<20)
	if got := c.PostMaxSize(); got != 1<<20 {
		t.Fatalf("post_max_size at the start: %d", got)
	}
	if err := c.Roll([]byte(`{"post_max_size":8388608}`), time.Second); err != nil {
		t.Fatal(err)
	}
	if got := c.PostMaxSize(); got != 8<<20 {
		t.Errorf("post_max_size after a roll to 8M: %d", got)
	}
}

// With every child dead, a request finds none: the runtime waits until one is back, and
// each child that starts taking requests says so (Installed), so that wait ends at once.
func TestEveryChildThatStartsTakingRequestsIsAnnounced(t *testing.T) {
	c, installed := settingsCluster(t, 0)
	if n := installed.Load(); n != 2 {
		t.Fatalf("%d children announced at the start, want 2", n)
	}
	if n := c.Running(); n != 2 {
		t.Fatalf("%d children running, want 2", n)
	}
	for _, p := range c.live() {
		p.kill()
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Running() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := c.Running(); n != 0 {
		t.Fatalf("%d children running after both were killed", n)
	}
	b := core.RequestBuffer{Strings: []byte("GET/"), Spans: []uint32{0, 3, 3, 1}, ContentLength: -1}
	if _, rc := c.Submit(core.ClassicPool, &b, 0, 1); rc != core.ErrStopped {
		t.Fatalf("a request with no child running: code %d, want ErrStopped", rc)
	}
	for installed.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := installed.Load(); n != 4 {
		t.Fatalf("%d children announced, want 4: the replacements were not", n)
	}
	if _, rc := c.Submit(core.ClassicPool, &b, 0, 2); rc != core.OK {
		t.Errorf("a request once a replacement runs: code %d", rc)
	}
}

// A child whose worker cannot boot refuses that worker's requests without holding them,
// so it looks the least loaded: requests go to the others while its refusals say it
// cannot boot, and to it again once its next attempt is due, or when no other runs.
func TestAChildWhoseWorkerCannotBootIsPassedBy(t *testing.T) {
	const poolID = 5
	c := &Cluster{opts: Options{Processes: 2}}
	var procs []*proc
	for i := range 2 {
		p := &proc{c: c, slot: i, pools: map[uint32]bool{poolID: true}}
		p.alive.Store(true)
		procs = append(procs, p)
	}
	c.procs = procs
	failing, other := procs[0], procs[1]
	other.load.Store(3)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.leastLoaded(poolID, nil, 0); got != failing {
		t.Fatalf("before any refusal: slot %d, want the least loaded", got.slot)
	}
	c.noteBootFailing(failing, poolID, 300*time.Millisecond, now)
	for range 4 {
		if got := c.leastLoaded(poolID, nil, 0); got != other {
			t.Fatalf("while its worker cannot boot: slot %d", got.slot)
		}
	}
	if got := c.leastLoaded(core.ClassicPool, nil, 0); got != failing {
		t.Errorf("its classic threads serve on: slot %d", got.slot)
	}
	if got := c.leastLoaded(poolID, nil, 1<<uint(other.slot)); got != failing {
		t.Errorf("with the other child refusing too: slot %d, want the failing one", got.slot)
	}
	other.alive.Store(false)
	if got := c.leastLoaded(poolID, nil, 0); got != failing {
		t.Errorf("with no other child running: %v, want the failing one", got)
	}
	other.alive.Store(true)
	if !c.failsToBoot(failing, poolID, now.Add(299*time.Millisecond)) || c.failsToBoot(failing, poolID, now.Add(300*time.Millisecond)) {
		t.Error("its boot failure lasts until its next attempt")
	}
	if got := c.leastLoaded(poolID, nil, 0); got != failing {
		t.Errorf("once its next attempt is due: slot %d, want the least loaded", got.slot)
	}
}

// collectingHost keeps the answers of the requests, in order.
type collectingHost struct{ answers chan core.Response }

func (h collectingHost) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	resp.Thread = int(handle) // which request, for the test
	h.answers <- resp
	return true
}
func (collectingHost) ReadBody(handle uintptr, buf []byte) int { return -1 }
func (collectingHost) Logger(handle uintptr) *zap.Logger       { return zap.NewNop() }

// A request that a dead child held and no PHP thread took, while no other child runs,
// waits for the next child (parked) instead of being answered as lost. Its client may
// still withdraw it, and a cluster that stops refuses those still waiting.
func TestRequestsOfADeadChildWaitWhileNoChildRuns(t *testing.T) {
	host := collectingHost{answers: make(chan core.Response, 4)}
	previous := core.CurrentHost()
	core.SetHost(host)
	t.Cleanup(func() { core.SetHost(previous) })
	c := &Cluster{opts: Options{Processes: 2}, procs: make([]*proc, 2),
		stopped: make(chan struct{})}
	dead := &proc{c: c, slot: 0}
	b := core.RequestBuffer{Strings: []byte("GET/"), Spans: []uint32{0, 3, 3, 1}, ContentLength: -1}
	var subs []*Submitted
	for handle := range uint64(2) {
		s := &Submitted{handle: handle + 1}
		s.p.Store(dead)
		if !c.resend(held{s: s, packed: packSubmit(nil, core.ClassicPool, 0, &b)}, dead) {
			t.Fatalf("request %d: not kept while no child runs", s.handle)
		}
		subs = append(subs, s)
	}
	select {
	case resp := <-host.answers:
		t.Fatalf("a parked request was answered: %+v", resp)
	default:
	}
	if !subs[0].Cancel() {
		t.Fatal("a parked request could not be withdrawn")
	}
	if resp := <-host.answers; resp.Thread != 1 || resp.Refusal != core.RefusedWithdrawn || resp.Flags&core.ResponseDone == 0 {
		t.Errorf("the withdrawn request's end: %+v", resp)
	}
	c.Shutdown(0)
	if resp := <-host.answers; resp.Thread != 2 || resp.Refusal != core.RefusedStopped || resp.Flags&core.ResponseDone == 0 {
		t.Errorf("a request still parked at shutdown: %+v", resp)
	}
	if c.resend(held{s: subs[1], packed: packSubmit(nil, core.ClassicPool, 0, &b)}, dead) {
		t.Error("a stopped cluster kept a request")
	}
}
