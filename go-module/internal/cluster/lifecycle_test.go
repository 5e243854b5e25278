// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// fakeChildEnv makes the test binary a fake child: spawn runs it as its child command.
const fakeChildEnv = "PHP_WORKER_TEST_FAKE_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeChildEnv); mode != "" {
		os.Exit(fakeChild(mode))
	}
	os.Exit(m.Run())
}

// fakeChild answers the wire as a child does, without PHP: every control call succeeds.
// At its first request it fails as mode says:
//   - "garbage": it sends a frame past the size limit, and lives on;
//   - "orphan": it starts a process that inherits the wire (as a program a script
//     starts did before close-on-exec), and exits;
//   - "answer": it sends 300 log lines and the request's whole response, and exits;
//   - "stop": it stops itself (SIGSTOP), as a debugger or the cgroup freezer would.
func fakeChild(mode string) int {
	f := os.NewFile(childFD, "php_worker wire")
	l := newLink(f)
	r := newReader(f)
	for {
		kind, id, payload, err := r.next()
		if err != nil {
			return 0
		}
		switch kind {
		case kindCall:
			l.send(kindReply, id, fakeReply(payload))
		case kindSubmit:
			switch mode {
			case "garbage":
				var head [headLen]byte
				binary.LittleEndian.PutUint32(head[:], ^uint32(0))
				_, _ = f.Write(head[:])
				time.Sleep(time.Minute)
				return 0
			case "orphan":
				cmd := exec.Command("sleep", "5")
				cmd.ExtraFiles = []*os.File{f}
				_ = cmd.Start()
				return 7
			case "answer":
				for range 300 {
					l.send(kindLog, 0, packLog(0, "a line", nil))
				}
				l.sendWith(kindRespond, id, true, func(dst []byte) []byte {
					return packRespond(dst, &core.Response{Status: 200, Flags: core.ResponseDone, Thread: 1})
				})
				return 0
			case "stop":
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
		}
	}
}

// fakeReply is the fake child's answer to a control call: a start must carry the
// build of this binary.
func fakeReply(payload []byte) []byte {
	var req call
	if err := json.Unmarshal(payload, &req); err != nil {
		return []byte(`{"error":"unreadable call"}`)
	}
	if req.Op == opStart && req.Build != buildID() {
		return []byte(`{"error":"the start carries another build"}`)
	}
	if req.Op == opStart && strings.Contains(string(req.Settings), "refused") {
		return []byte(`{"error":"PHP refuses these settings"}`)
	}
	var flaky struct {
		Starts string `json:"flaky_starts"`
	}
	if req.Op == opStart && json.Unmarshal(req.Settings, &flaky) == nil && flaky.Starts != "" {
		// Starts 2 to 4 of these settings fail, as a start can for a moment (memory).
		f, err := os.OpenFile(flaky.Starts, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = f.Write([]byte{'.'})
			info, _ := f.Stat()
			f.Close()
			if n := info.Size(); n >= 2 && n <= 4 {
				return []byte(`{"error":"no memory for a moment"}`)
			}
		}
	}
	return []byte(`{}`)
}

// recordingHost is a core.Host that keeps each response, noting whether the process
// of pid still ran when it came.
type recordingHost struct {
	pid       atomic.Int64
	responses chan recorded
}

type recorded struct {
	resp     core.Response
	childRan bool
}

func (h *recordingHost) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	h.responses <- recorded{resp: resp, childRan: running(int(h.pid.Load()))}
	return true
}
func (h *recordingHost) ReadBody(handle uintptr, buf []byte) int { return -1 }

// Logger takes a millisecond: the read loop lags behind a child that writes fast.
func (h *recordingHost) Logger(handle uintptr) *zap.Logger {
	time.Sleep(time.Millisecond)
	return zap.NewNop()
}

// running tells whether a process runs: it exists and is not a zombie.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// fakeCluster is a cluster whose children are fake children of mode; it stops at
// once, so a dead child's requests are answered, not resent, and it is not replaced.
func fakeCluster(t *testing.T, mode string) (*Cluster, *recordingHost) {
	t.Setenv(fakeChildEnv, mode)
	host := &recordingHost{responses: make(chan recorded, 4)}
	previous := core.CurrentHost()
	core.SetHost(host)
	t.Cleanup(func() { core.SetHost(previous) })
	c := &Cluster{opts: Options{Processes: 2, Command: []string{os.Args[0], "-test.run=^$"}, PingTimeout: time.Second},
		stopped: make(chan struct{})}
	c.stopping.Store(true)
	return c, host
}

func submitOne(p *proc) {
	b := core.RequestBuffer{Strings: []byte("GET/"), Spans: []uint32{0, 3, 3, 1}, ContentLength: -1}
	p.submit(&Submitted{handle: 7}, core.ClassicPool, 0, &b)
}

// spawnFake starts a fake child playing mode (fakeChild) in a cluster of its own, and
// submits one request to it.
func spawnFake(t *testing.T, mode string) (*proc, *recordingHost) {
	t.Helper()
	c, host := fakeCluster(t, mode)
	p, err := c.spawn(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	host.pid.Store(int64(p.cmd.Process.Pid))
	submitOne(p)
	return p, host
}

// answer is the response the request got within the wait, or fails the test with why.
func answer(t *testing.T, host *recordingHost, within time.Duration, why string) recorded {
	t.Helper()
	select {
	case r := <-host.responses:
		return r
	case <-time.After(within):
		t.Fatal(why)
	}
	return recorded{}
}

// A child declared dead while it still runs (here: it broke the wire) could still hand
// its queued requests to its PHP threads. It is killed and reaped before the Caddy
// process reads which requests it took, so none runs twice.
func TestAChildWhoseWireFailsIsKilledBeforeItsRequestsAreAnswered(t *testing.T) {
	p, host := spawnFake(t, "garbage")
	r := answer(t, host, 10*time.Second, "the request of a child whose wire failed was never answered")
	if r.resp.Refusal != core.RefusedProcessDied {
		t.Errorf("answered %+v, want the refusal of a dead process", r.resp)
	}
	if r.childRan {
		t.Error("the request was answered while its child still ran: a PHP thread there could take it yet")
	}
	if how := p.exitedHow(5 * time.Second); how != "killed by SIGKILL" {
		t.Errorf("the child ended: %s, want killed by SIGKILL", how)
	}
}

// A child that exits while a process it started holds the other end of its socket: the
// socket never ends, but the Caddy process sees the death at once and answers.
func TestAChildThatExitsIsSeenDeadWhateverHoldsItsSocket(t *testing.T) {
	p, host := spawnFake(t, "orphan")
	r := answer(t, host, 3*time.Second, "a child that exited was not seen dead while a process it started held its socket")
	if r.resp.Refusal != core.RefusedProcessDied {
		t.Errorf("answered %+v, want the refusal of a dead process", r.resp)
	}
	if how := p.exitedHow(time.Second); how != "exit status 7" {
		t.Errorf("the child ended: %s, want exit status 7", how)
	}
}

// A child of another build than the Caddy process's (an upgrade replaced the binary
// before it was started) refuses to start, and says why: two builds do not share a wire.
func TestAChildRefusesTheStartOfAnotherBuild(t *testing.T) {
	c := &child{}
	_, err := c.run(&call{Op: opStart, Build: "another-build"})
	if err == nil || !strings.Contains(err.Error(), "another-build") || !strings.Contains(err.Error(), buildID()) {
		t.Fatalf("a start from another build: %v", err)
	}
	if c.engine.Load() != nil {
		t.Error("PHP started")
	}
}

// The build id is the Go linker's, whose last part hashes the whole linked file.
func TestTheBuildIDIsTheBinarysOwn(t *testing.T) {
	id := buildID()
	if id == "" {
		t.Fatal("no build id read from /proc/self/exe")
	}
	out, err := exec.Command("go", "tool", "buildid", os.Args[0]).Output()
	if err != nil {
		t.Skipf("go tool buildid: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != id {
		t.Errorf("build id %q, go tool buildid says %q", id, got)
	}
}

// A child that answers a request and exits at once: what it wrote before its end is
// read whole, and the request gets its response, not the 502 of a dead child.
func TestWhatAChildWroteBeforeItsEndIsRead(t *testing.T) {
	_, host := spawnFake(t, "answer")
	if r := answer(t, host, 10*time.Second, "the request was never answered"); r.resp.Status != 200 {
		t.Errorf("answered %+v, want the child's 200", r.resp)
	}
}

// A child that stops answering (stopped, as by a debugger) is killed once its pings go
// unanswered for the ping timeout: its request is answered, and a control call waiting
// on it ends, instead of both waiting for ever.
func TestAChildThatAnswersNoPingIsKilled(t *testing.T) {
	p, host := spawnFake(t, "stop")
	calls := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // after the child stopped
		_, err := p.call(call{Op: opApply, State: []byte(`{"classic":1}`)})
		calls <- err
	}()
	r := answer(t, host, 10*time.Second, "the request of a stopped child was never answered")
	if r.resp.Refusal != core.RefusedProcessDied {
		t.Errorf("answered %+v, want the refusal of a dead process", r.resp)
	}
	if how := p.exitedHow(5 * time.Second); how != "killed by SIGKILL" {
		t.Errorf("the child ended: %s, want killed by SIGKILL", how)
	}
	select {
	case err := <-calls:
		if err == nil {
			t.Error("a call to a stopped child succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Error("a control call still waits on a child that was killed")
	}
}

// startFakeChildren starts a fake child in each of the cluster's slots and installs it.
func startFakeChildren(t *testing.T, c *Cluster) []*proc {
	t.Helper()
	c.procs = make([]*proc, c.opts.Processes)
	for i := range c.procs {
		p, err := c.spawn(i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.kill)
		c.procs[i] = p
	}
	return c.procs
}

// A roll stops a slot's background workers before it starts the slot's new child (no
// more than num copies at once). When PHP refuses the new settings, the old child keeps
// its slot and gets its background workers back.
func TestAFailedRollGivesTheOldChildItsBackgroundWorkersBack(t *testing.T) {
	c, _ := fakeCluster(t, "plain")
	c.state.Pools = []core.PoolState{{ID: 1, Spec: []byte(`{"kind":"background","num":1}`), Generation: 1}}
	startFakeChildren(t, c)
	old := c.procs[0]
	if !old.pools[1] || c.procs[1].pools[1] {
		t.Fatalf("the background worker of num 1 runs in child 0 (%v) and not in child 1 (%v)", old.pools[1], c.procs[1].pools[1])
	}
	if err := c.Roll([]byte(`{"refused":true}`), time.Second); err == nil {
		t.Fatal("a roll to settings PHP refuses succeeded")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[0] != old || !old.pools[1] || old.noBackground {
		t.Errorf("slot 0 keeps its child %v and its background worker %v", c.procs[0] == old, old.pools[1] && !old.noBackground)
	}
}

// A roll whose first new child started, but whose second fails to start for a moment:
// the settings are the cluster's (the roll succeeds), the second slot keeps its old
// child while a new one is tried again, and then runs the new settings too.
func TestARollThatFailsPastTheFirstSlotEndsWithTheNewSettingsEverywhere(t *testing.T) {
	c, _ := fakeCluster(t, "plain")
	startFakeChildren(t, c)
	c.stopping.Store(false) // the slot is tried again
	t.Cleanup(func() {
		c.stopping.Store(true)
		close(c.stopped)
		c.replacing.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.procs {
			p.kill()
		}
	})
	old := c.procs[1]
	settings := []byte(`{"flaky_starts":"` + t.TempDir() + `/starts"}`)
	if err := c.Roll(settings, time.Second); err != nil {
		t.Fatalf("the roll failed, though its first child started: %v", err)
	}
	c.mu.Lock()
	kept := c.procs[1] == old
	c.mu.Unlock()
	if !kept {
		t.Fatal("the slot whose new child did not start lost its old child")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		current := c.procs[1]
		c.mu.Unlock()
		if current != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot never got a child with the new settings")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if how := old.exitedHow(5 * time.Second); how == "how is not known yet" {
		t.Error("the old child of the slot still runs")
	}
	if string(c.opts.Settings) != string(settings) {
		t.Errorf("the cluster's settings are %s", c.opts.Settings)
	}
}

// The child of debugged requests that dies soon after its start (a debugger extension
// that crashes at every request) is started again after a pause that doubles, as a
// slot's replacement is: not once per debugged request.
func TestTheDebugChildIsStartedAgainAfterAGrowingPause(t *testing.T) {
	c, host := fakeCluster(t, "orphan") // it exits at its first request
	c.stopping.Store(false)
	var pauses []time.Duration
	for range 3 {
		p := c.debugChild()
		if p == nil {
			t.Fatal("no child of debugged requests started")
		}
		c.mu.Lock()
		notBefore := c.debugNotBefore
		c.mu.Unlock()
		if started := p.start; started.Before(notBefore) {
			t.Errorf("a child started at %v, before the pause after the last death ended (%v)", started, notBefore)
		}
		submitOne(p)
		answer(t, host, 5*time.Second, "the request of the dying child was never answered")
		<-p.exited
		for func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.debug == p }() {
			time.Sleep(time.Millisecond)
		}
		c.mu.Lock()
		pauses = append(pauses, c.debugBackoff)
		c.mu.Unlock()
	}
	c.stopping.Store(true)
	if pauses[0] != minBackoff || pauses[1] != 2*minBackoff || pauses[2] != 4*minBackoff {
		t.Errorf("pauses after each quick death: %v, want each twice the last", pauses)
	}
}
