// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/php-worker/php_worker/go-module/internal/phpprofile"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

func TestShareDividesEvenlyWithAtLeastOnePerChild(t *testing.T) {
	cases := []struct {
		count, n int
		want     []int
	}{
		{5, 2, []int{3, 2}},
		{4, 2, []int{2, 2}},
		{1, 3, []int{1, 1, 1}}, // every child serves every pool
		{0, 2, []int{0, 0}},
		{7, 3, []int{3, 2, 2}},
	}
	for _, c := range cases {
		var got []int
		for i := 0; i < c.n; i++ {
			got = append(got, share(c.count, i, c.n))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("share(%d over %d) = %v, want %v", c.count, c.n, got, c.want)
		}
	}
}

func TestBackgroundWorkersAreDividedNotMultiplied(t *testing.T) {
	c := &Cluster{opts: Options{Processes: 3}}
	runs := func(spec string) []bool {
		var out []bool
		for i := 0; i < 3; i++ {
			out = append(out, c.runs([]byte(spec), i))
		}
		return out
	}
	if got := runs(`{"kind":"background","num":1}`); !slices.Equal(got, []bool{true, false, false}) {
		t.Errorf("background num 1: %v", got)
	}
	if got := runs(`{"kind":"background","num":2}`); !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("background num 2: %v", got)
	}
	for _, spec := range []string{`{"kind":"http","num":1}`, `{"kind":"task","num":1}`, `{"num":1}`} {
		if got := runs(spec); !slices.Equal(got, []bool{true, true, true}) {
			t.Errorf("%s: %v", spec, got)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(c.specShare([]byte(`{"kind":"http","num":5,"max_threads":8,"name":"w"}`), 2), &m); err != nil {
		t.Fatal(err)
	}
	if m["num"] != 1.0 || m["max_threads"] != 2.0 || m["name"] != "w" {
		t.Errorf("the third child's share of num 5, max_threads 8: %v", m)
	}
}

func TestSubmissionsCrossTheWireWhole(t *testing.T) {
	b := core.RequestBuffer{EnvPairs: 2, BodyLen: 3, ContentLength: 3, Spans: []uint32{1, 2, 3, 4}, Strings: []byte("GET/x?y=1abc")}
	packed := packSubmit(nil, 7, core.RequestBodyComplete, &b)
	var got core.RequestBuffer
	pool, flags, err := unpackSubmit(packed, &got)
	if err != nil || pool != 7 || flags != core.RequestBodyComplete {
		t.Fatalf("pool %d flags %d err %v", pool, flags, err)
	}
	if got.EnvPairs != 2 || got.BodyLen != 3 || got.ContentLength != 3 || !slices.Equal(got.Spans, b.Spans) || !bytes.Equal(got.Strings, b.Strings) {
		t.Errorf("unpacked %+v, sent %+v", got, b)
	}
	if _, _, err := unpackSubmit(packed[:10], &got); err == nil {
		t.Error("a truncated submission unpacked")
	}
}

func TestFramesArriveInOrderFromManySenders(t *testing.T) {
	ours, theirs := socketPair(t)
	l := newLink(ours)
	r := newReader(theirs)
	const senders, each = 8, 500
	var wg sync.WaitGroup
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := uint64(s*each + i)
				switch i % 3 {
				case 0:
					l.send(kindRespond, id, []byte{byte(s)}, bytes.Repeat([]byte{'x'}, i))
				case 1:
					l.post(kindRespond, id, []byte{byte(s)}, bytes.Repeat([]byte{'x'}, i))
				default:
					l.sendWith(kindRespond, id, true, func(dst []byte) []byte {
						return append(append(dst, byte(s)), bytes.Repeat([]byte{'x'}, i)...)
					})
				}
			}
		}()
	}
	next := make([]int, senders) // each sender's frames keep their order
	for n := 0; n < senders*each; n++ {
		kind, id, payload, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		s := int(payload[0])
		i := int(id) - s*each
		// post queues at once and only writes later, so one sender's frames keep
		// their order whichever way each was sent.
		if kind != kindRespond || i != next[s] || len(payload) != 1+i {
			t.Fatalf("frame %d: kind %d sender %d index %d (want %d) length %d", n, kind, s, i, next[s], len(payload))
		}
		next[s]++
	}
	wg.Wait()
	l.close()
	if _, _, _, err := r.next(); err == nil {
		t.Error("a frame after the link closed")
	}
	if l.send(kindRespond, 1) || l.post(kindRespond, 1) {
		t.Error("a closed link took a frame")
	}
}

// TestASenderIsNotKeptWritingOthersFrames: the sender that finds the link idle writes
// its frame, and what was queued before it, then returns; what other senders queue
// meanwhile, behind a slow reader, a writer goroutine writes. Before, the first sender
// stayed in the write loop for as long as the others kept queueing.
func TestASenderIsNotKeptWritingOthersFrames(t *testing.T) {
	ours, theirs := socketPair(t)
	l := newLink(ours)
	r := newReader(theirs)
	go func() {
		for {
			if _, _, _, err := r.next(); err != nil {
				return
			}
			time.Sleep(200 * time.Microsecond) // a reader slower than the senders
		}
	}()
	returned := make(chan struct{})
	go func() {
		l.send(kindRespond, 1, make([]byte, 4<<20)) // the link is idle: this sender writes
		close(returned)
	}()
	for !func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.writing }() {
		time.Sleep(time.Millisecond)
	}
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for range 4 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			chunk := make([]byte, 16<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				l.send(kindRespond, 2, chunk)
			}
		}()
	}
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Error("the first sender is still writing the frames the others keep queueing")
	}
	close(stop)
	senders.Wait()
	l.close()
}

// TestAFramePastTheLimitIsRefusedAndTheWireLives: a frame past maxFrame would make the
// peer's reader end the wire and every request on it; the link refuses it instead, and
// the frames after it cross.
func TestAFramePastTheLimitIsRefusedAndTheWireLives(t *testing.T) {
	ours, theirs := socketPair(t)
	l := newLink(ours)
	r := newReader(theirs)
	go func() {
		if l.send(kindLog, 1, make([]byte, maxFrame+1)) {
			t.Error("a frame past maxFrame was taken")
		}
		l.send(kindLog, 2, []byte("after"))
	}()
	kind, id, payload, err := r.next()
	if err != nil || kind != kindLog || id != 2 || string(payload) != "after" {
		t.Fatalf("got kind %d id %d %q, %v; want the frame after the refused one", kind, id, payload, err)
	}
	l.close()
}

// TestALogMessageIsCutAtACharactersStart: a message past maxLogPart keeps its first
// maxLogPart bytes or fewer, never half a character, and says how much went.
func TestALogMessageIsCutAtACharactersStart(t *testing.T) {
	if got := cutLogMessage("short"); got != "short" {
		t.Errorf("a short message changed: %q", got)
	}
	msg := strings.Repeat("é", maxLogPart) // 2 bytes each: the bound falls inside one
	got := cutLogMessage("x" + msg)
	head, _, _ := strings.Cut(got, "…")
	if !utf8.ValidString(got) || len(head) > maxLogPart || !strings.HasSuffix(got, fmt.Sprintf("[%d bytes cut]", 1+len(msg)-len(head))) {
		t.Errorf("cut to %d bytes, valid %v, ends %q", len(head), utf8.ValidString(got), got[len(got)-30:])
	}
}

func TestTakenTableTellsWhichRequestsStarted(t *testing.T) {
	parent, file, err := newTakenTable()
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	defer parent.unmap()
	child, err := mapTaken(int(file.Fd())) // a second mapping, as the child's
	if err != nil {
		t.Fatal(err)
	}
	defer child.unmap()
	a, b := parent.take(), parent.take()
	if a == noSlot || b == noSlot || a == b {
		t.Fatalf("slots %d and %d", a, b)
	}
	atomic.StoreUint64(child.word(a), 41) // as the Rust core does, through SubmitMarked
	if child.word(noSlot) != nil {
		t.Error("a request without a slot has a word to mark")
	}
	if !parent.taken(a, 41) || parent.taken(b, 42) {
		t.Error("the child's mark is not what the parent reads")
	}
	parent.release(a)
	if again := parent.take(); again != a || parent.taken(again, 41) {
		t.Error("a slot given again still says taken")
	}
	if !parent.taken(noSlot, 7) {
		t.Error("a request without a slot must count as taken: it may have started")
	}
	var none takenTable
	if none.take() != noSlot {
		t.Error("a full table gave a slot")
	}
	p := packSubmit(nil, 1, 0, &core.RequestBuffer{})
	if submitSlot(p) != noSlot {
		t.Error("a packed submission starts with no slot")
	}
	setSubmitSlot(p, 9)
	if submitSlot(p) != 9 {
		t.Error("the slot did not stick")
	}
}

func TestTrailWriterKeepsTheCrashTrailAndPassesEveryLineOn(t *testing.T) {
	var out bytes.Buffer
	w := &trailWriter{out: &out}
	trail := `{"level":"fatal","msg":"PHP thread received a fatal signal; the process ends","signal":"SIGSEGV","uri":"/crash.php","php_file":"/app/crash.php","php_line":4}`
	for _, part := range []string{"PHP Warning: x\n{\"level\":\"fat", trail[len(`{"level":"fat`):], "\nunfinished"} {
		if n, err := w.Write([]byte(part)); n != len(part) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", part, n, err)
		}
	}
	w.end()
	if want := "PHP Warning: x\n" + trail + "\nunfinished\n"; out.String() != want {
		t.Errorf("passed on %q, want %q", out.String(), want)
	}
	got := trailFields(w, "SIGSEGV", time.Now())
	if got["signal"] != "SIGSEGV" || got["uri"] != "/crash.php" || got["php_file"] != "/app/crash.php" || got["php_line"] != 4.0 {
		t.Errorf("trail fields %v", got)
	}
}

func trailFields(w *trailWriter, signal string, died time.Time) map[string]any {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range w.fields(signal, died) {
		f.AddTo(enc)
	}
	return enc.Fields
}

// A line that only quotes the trail's message (an app's JSON log line with user input
// in it) labels no death: the trail must name the signal the process died of, and come
// just before its death.
func TestALineQuotingTheTrailLabelsNoOtherDeath(t *testing.T) {
	w := &trailWriter{out: io.Discard}
	spoof := `{"level":"info","msg":"search for PHP thread received a fatal signal","signal":"SIGSEGV","uri":"/admin/secret"}` + "\n"
	_, _ = w.Write([]byte(spoof))
	if got := trailFields(w, "SIGKILL", time.Now()); len(got) != 0 {
		t.Errorf("a death by SIGKILL took the fields of a line naming SIGSEGV: %v", got)
	}
	if got := trailFields(w, "SIGSEGV", time.Now().Add(time.Minute)); len(got) != 0 {
		t.Errorf("a death a minute after the line took its fields: %v", got)
	}
	if got := trailFields(w, "SIGSEGV", time.Now()); got["uri"] != "/admin/secret" {
		t.Errorf("a trail naming the signal, just before the death, labels it: %v", got)
	}
}

func socketPair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		_ = syscall.SetNonblock(fd, true)
	}
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestTheSnapshotAddsItsFieldsToAnEngines(t *testing.T) {
	golden, err := os.ReadFile("../../../rust-core/tests/golden/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{Processes: 2}}
	procs := []*proc{{slot: 0, cmd: &exec.Cmd{Process: &os.Process{Pid: 10}}}, {slot: 1, cmd: &exec.Cmd{Process: &os.Process{Pid: 11}}}}
	procs[0].load.Store(3)
	raw, err := mergeRaw(c, procs, golden, nil)
	if err != nil {
		t.Fatal(err)
	}
	var one, merged any
	if err := json.Unmarshal(golden, &one); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &merged); err != nil {
		t.Fatal(err)
	}
	before, after := fieldPaths(one), fieldPaths(merged)
	var added []string
	for _, f := range after {
		if !slices.Contains(before, f) && !strings.HasPrefix(f, "opcache_by_process[].opcache.") {
			added = append(added, f)
		}
	}
	want := slices.Clone(SnapshotFields)
	slices.Sort(want)
	if !slices.Equal(added, want) {
		t.Errorf("the cluster adds %v; SnapshotFields says %v", added, want)
	}
	for _, f := range before {
		if !slices.Contains(after, f) {
			t.Errorf("the cluster's snapshot lacks %s", f)
		}
	}
	m := merged.(map[string]any)
	ps := m["processes"].([]any)
	if len(ps) != 2 || ps[0].(map[string]any)["state"] != "running" || ps[1].(map[string]any)["state"] != "restarting" ||
		ps[0].(map[string]any)["requests"] != 3.0 || ps[1].(map[string]any)["pid"] != 11.0 {
		t.Errorf("processes: %v", ps)
	}
}

// mergeRaw merges the children's snapshots as they come over the wire (nil: none).
func mergeRaw(c *Cluster, procs []*proc, raws ...[]byte) ([]byte, error) {
	snapshots := make([]*core.Stats, len(raws))
	for i, raw := range raws {
		if raw == nil {
			continue
		}
		s, err := core.DecodeStats(raw)
		if err != nil {
			return nil, err
		}
		snapshots[i] = s
	}
	return json.Marshal(c.merge(procs, snapshots))
}

// fieldPaths lists a JSON value's field paths (pools[].duration.sum), sorted.
func fieldPaths(v any) []string {
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				path := k
				if prefix != "" {
					path = prefix + "." + k
				}
				out = append(out, path)
				walk(path, child)
			}
		case []any:
			for _, child := range v {
				walk(prefix+"[]", child)
			}
		}
	}
	walk("", v)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestProfilesOfTheChildrenMergeIntoOne(t *testing.T) {
	a := `{"hz":100,"mode":"wall","duration_ns":5,"frames":[{"function":"a","file":"/a.php","line":1},{"function":"{main}","file":"/a.php","line":9}],"samples":[{"stack":[0,1],"worker":"","route":"/a","kind":"classic","count":2,"weight":20}],"dropped":1}`
	b := `{"hz":100,"mode":"wall","duration_ns":7,"frames":[{"function":"b","file":"/b.php","line":3}],"samples":[{"stack":[0],"worker":"w","route":"/b","kind":"worker","count":1,"weight":10}],"dropped":2}`
	raw, err := mergeProfiles([][]byte{[]byte(a), []byte(b)})
	if err != nil {
		t.Fatal(err)
	}
	var d phpprofile.Data
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Hz != 100 || d.Mode != "wall" || d.DurationNs != 7 || d.Dropped != 3 || len(d.Frames) != 3 || len(d.Samples) != 2 {
		t.Fatalf("merged %+v", d)
	}
	if got := d.Frames[d.Samples[1].Stack[0]].Function; got != "b" {
		t.Errorf("the second child's sample points at %q, want b", got)
	}
	if got := d.Frames[d.Samples[0].Stack[1]].Function; got != "{main}" {
		t.Errorf("the first child's sample points at %q, want {main}", got)
	}
	if _, err := phpprofile.Build(raw, time.Now()); err != nil {
		t.Errorf("the merged profile does not build: %v", err)
	}
	if _, err := mergeProfiles([][]byte{[]byte("{")}); err == nil {
		t.Error("a broken part merged")
	}
}

// lockingHost is a core.Host whose Respond takes a lock, as a request's does.
type lockingHost struct {
	mu        sync.Mutex
	responded chan core.Response
}

func (h *lockingHost) Respond(handle uintptr, resp core.Response, from core.Delivery) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.responded <- resp
	return true
}
func (h *lockingHost) ReadBody(handle uintptr, buf []byte) int { return -1 }
func (h *lockingHost) Logger(handle uintptr) *zap.Logger       { return zap.NewNop() }

// A withdraw holds its request's lock while it waits for the child's verdict. When the
// child finished the request first, its response frame arrives before the verdict, and
// delivering it takes that lock: the read loop must give the withdraw its answer first,
// or both wait for ever.
// procOnASocket is a proc whose child is the other end of a socket pair (the test
// plays it) and whose process is a sleep, holding request 7; the host records what it
// is given.
func procOnASocket(t *testing.T) (*lockingHost, *proc, *os.File) {
	t.Helper()
	host := &lockingHost{responded: make(chan core.Response, 4)}
	previous := core.CurrentHost()
	core.SetHost(host)
	t.Cleanup(func() { core.SetHost(previous) })

	ours, theirs := socketPair(t)
	taken, table, err := newTakenTable()
	if err != nil {
		t.Fatal(err)
	}
	table.Close()
	cmd := exec.Command("sleep", "30") // a real process for the read loop's end to kill and reap
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	c := &Cluster{opts: Options{Processes: 2}, stopped: make(chan struct{})}
	c.stopping.Store(true) // no replacement when the link ends
	p := &proc{c: c, cmd: cmd, link: newLink(ours), taken: taken, trail: &trailWriter{out: io.Discard},
		inflight: map[uint64]held{7: {slot: noSlot}}, calls: map[uint64]chan reply{}, cancels: map[uint64]chan bool{},
		exited: make(chan struct{}), trailDone: make(chan struct{}), pools: map[uint32]bool{}}
	close(p.trailDone)
	p.alive.Store(true)
	go p.watch()
	go p.readLoop(newReader(ours))
	return host, p, theirs
}

// TestALateWithdrawVerdictDoesNotMarkTheHandlesNextRequest: a withdraw's verdict that
// comes after its request ended (the DONE overtook it) and after the handle went to a
// new request on the same child says nothing of that request: were it marked
// withdrawn, a crash would answer it 502 instead of moving it to another child.
func TestALateWithdrawVerdictDoesNotMarkTheHandlesNextRequest(t *testing.T) {
	_, p, theirs := procOnASocket(t)
	synced := make(chan reply, 1)
	p.mu.Lock()
	p.calls[99] = synced
	p.mu.Unlock()
	child := newLink(theirs)
	child.send(kindCancelled, 7, []byte{1}) // the old request's, withdrawn
	child.send(kindReply, 99, []byte(`{}`)) // read after it
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("the read loop took no frame")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight[7].withdrawn {
		t.Error("the request now holding handle 7 was marked withdrawn by the verdict of an earlier one")
	}
	delete(p.inflight, 7) // nothing for the proc's end to answer once the test's host is gone
}

func TestAWithdrawWaitingForItsVerdictDoesNotBlockTheReadLoop(t *testing.T) {
	host, p, theirs := procOnASocket(t)
	// The child: it finished request 7 before the cancel came, then says so.
	child := newLink(theirs)
	go func() {
		r := newReader(theirs)
		if kind, id, _, err := r.next(); err != nil || kind != kindCancel || id != 7 {
			return
		}
		child.sendWith(kindRespond, 7, true, func(dst []byte) []byte {
			return packRespond(dst, &core.Response{Status: 200, Flags: core.ResponseDone, Thread: 1})
		})
		child.send(kindCancelled, 7, []byte{0})
	}()

	verdict := make(chan bool, 1)
	go func() {
		host.mu.Lock() // the request's lock, held through the withdraw
		defer host.mu.Unlock()
		verdict <- p.cancel(7)
	}()
	select {
	case v := <-verdict:
		if v {
			t.Error("a request the child had answered was withdrawn")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the withdraw and the read loop wait for each other")
	}
	select {
	case resp := <-host.responded:
		if resp.Status != 200 || resp.Flags&core.ResponseDone == 0 {
			t.Errorf("delivered %+v", resp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the response was never delivered")
	}
	child.close()
	<-p.exited
}

// A withdraw that begins after response data of its request came, while the read loop
// delivers that data under the request's lock the withdraw holds: asking the child would
// wait for a verdict behind the blocked read loop, and every request of the child, its
// pings too, would wait for ever (seen under load with the child's core-served wire,
// whose answers overtake the cancel's registration). The withdraw is refused at once,
// for a last piece (DONE), a flush, and a submission the child refused.
func TestAWithdrawAfterItsRequestAnsweredDoesNotWaitForTheChild(t *testing.T) {
	const submitFailed = 0 // the case of a refused submission
	for _, flags := range []uint32{core.ResponseDone, core.ResponseFlush, submitFailed} {
		host, p, theirs := procOnASocket(t)
		child := newLink(theirs)
		cancels := make(chan struct{}, 1)
		go func() {
			r := newReader(theirs)
			for {
				kind, id, _, err := r.next()
				if err != nil {
					return
				}
				if kind == kindCancel && id == 7 {
					cancels <- struct{}{}
					child.send(kindCancelled, 7, []byte{0})
				}
			}
		}()
		host.mu.Lock() // the request's lock: its withdraw begins
		if flags == submitFailed {
			child.send(kindSubmitFailed, 7, []byte{byte(core.ErrQueueFull), 0, 0, 0})
		} else {
			child.sendWith(kindRespond, 7, true, func(dst []byte) []byte {
				return packRespond(dst, &core.Response{Status: 200, Flags: flags, Thread: 1})
			})
		}
		// The read loop took the frame and waits for the request's lock.
		deadline := time.Now().Add(5 * time.Second)
		for {
			p.mu.Lock()
			h, held := p.inflight[7]
			p.mu.Unlock()
			if !held || h.responded || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		verdict := make(chan bool, 1)
		go func() { verdict <- p.cancel(7) }()
		select {
		case v := <-verdict:
			if v {
				t.Errorf("flags %d: a request that answered was withdrawn", flags)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("flags %d: the withdraw waits for the child's verdict behind the read loop, which waits for the withdraw", flags)
		}
		host.mu.Unlock()
		select {
		case <-host.responded:
		case <-time.After(5 * time.Second):
			t.Fatalf("flags %d: the response was never delivered", flags)
		}
		select {
		case <-cancels:
			t.Errorf("flags %d: the child was asked to withdraw a request that answered", flags)
		default:
		}
		p.mu.Lock()
		delete(p.inflight, 7)
		p.mu.Unlock()
		child.close()
		<-p.exited
	}
}

// Prometheus reads a counter that drops as a reset: the cluster's counters must not go
// back when a child misses a snapshot, dies and is replaced, or answers out of order.
func TestTheClustersCountersNeverGoBack(t *testing.T) {
	golden, err := os.ReadFile("../../../rust-core/tests/golden/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	// A child that counted less (a fresh replacement, or an older snapshot): the golden
	// snapshot with every count halved.
	var half map[string]any
	if err := json.Unmarshal(golden, &half); err != nil {
		t.Fatal(err)
	}
	half["expired_requests"] = 10.0
	half["opcache"].(map[string]any)["restarts_opcache_reset"] = 8.0
	half["opcache"].(map[string]any)["usage"].(map[string]any)["hits"] = 12.0
	half["pools"].([]any)[0].(map[string]any)["crashes"] = 5.0
	half["pools"].([]any)[0].(map[string]any)["duration"].(map[string]any)["count"] = 4.0
	lower, _ := json.Marshal(half)

	c := &Cluster{opts: Options{Processes: 2}}
	newProc := func(slot, pid int) *proc {
		return &proc{c: c, slot: slot, cmd: &exec.Cmd{Process: &os.Process{Pid: pid}}}
	}
	a, b := newProc(0, 10), newProc(1, 11)
	type seen struct{ expired, reset, hits, crashes, requests, memory, ownMemory float64 }
	snapshot := func(procs []*proc, raws ...[]byte) seen {
		t.Helper()
		raw, err := mergeRaw(c, procs, raws...)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		o := m["opcache"].(map[string]any)
		pool := m["pools"].([]any)[0].(map[string]any)
		own := m["opcache_by_process"].([]any)[0].(map[string]any)["opcache"].(map[string]any)
		return seen{expired: num(m["expired_requests"]), reset: num(o["restarts_opcache_reset"]),
			hits: num(o["usage"].(map[string]any)["hits"]), crashes: num(pool["crashes"]),
			requests:  num(pool["duration"].(map[string]any)["count"]),
			memory:    num(o["usage"].(map[string]any)["memory_used"]),
			ownMemory: num(own["usage"].(map[string]any)["memory_used"])}
	}

	both := snapshot([]*proc{a, b}, golden, golden)
	if want := (seen{40, 34, 50, 22, 18, 44, 22}); both != want {
		t.Fatalf("two children: %+v, want %+v (counters and OPcache memory summed, each child's own unchanged)", both, want)
	}
	if missed := snapshot([]*proc{a, b}, golden, nil); missed.expired != 40 || missed.requests != 18 || missed.hits != 50 {
		t.Errorf("a child that did not answer took its counts out: %+v", missed)
	}
	if stale := snapshot([]*proc{a, b}, lower, golden); stale.expired != 40 || stale.crashes != 22 || stale.reset != 34 {
		t.Errorf("an older snapshot of a child made the counters go back: %+v", stale)
	}
	// b dies; its replacement starts from less.
	c.retireCounts(b)
	b2 := newProc(1, 12)
	after := snapshot([]*proc{a, b2}, golden, lower)
	if want := (seen{50, 42, 62, 27, 22, 44, 22}); after.expired != want.expired || after.reset != want.reset ||
		after.hits != want.hits || after.crashes != want.crashes || after.requests != want.requests {
		t.Errorf("after a death and a replacement: %+v, want the dead child's counts kept: %+v", after, want)
	}
	// A late snapshot of the dead child adds nothing twice.
	late, err := core.DecodeStats(lower)
	if err != nil {
		t.Fatal(err)
	}
	c.keepCounts(b, countsOf(late))
	if again := snapshot([]*proc{a, b2}, golden, lower); again != after {
		t.Errorf("the dead child counted again: %+v, was %+v", again, after)
	}
}

// Each child gets its share of the one state: its part of the threads, every HTTP worker
// with its num divided and the same generation numbers as the others, a background
// worker of num 1 in one child only (none while a roll replaces it), and the child of
// debugged requests classic threads alone.
func TestEachChildGetsItsShareOfTheState(t *testing.T) {
	c := &Cluster{opts: Options{Processes: 2}}
	s := core.State{Classic: 3, MaxThreads: 5, SharedStore: 7, Pools: []core.PoolState{
		{ID: 1, Spec: []byte(`{"kind":"http","num":4,"max_threads":6}`), Generation: 7,
			Staged: &core.StagedGeneration{Generation: 8, Spec: []byte(`{"kind":"http","num":2}`)}},
		{ID: 2, Spec: []byte(`{"kind":"background","num":1}`), Generation: 3},
	}}
	num := func(spec []byte) (n struct {
		Num        int `json:"num"`
		MaxThreads int `json:"max_threads"`
	}) {
		_ = json.Unmarshal(spec, &n)
		return
	}
	first, second := c.shareOf(s, &proc{slot: 0}), c.shareOf(s, &proc{slot: 1})
	if first.Classic+second.Classic != 3 || first.MaxThreads+second.MaxThreads != 5 || first.SharedStore != 7 {
		t.Errorf("threads and limits: %+v and %+v", first, second)
	}
	if len(first.Pools) != 2 || len(second.Pools) != 1 || second.Pools[0].ID != 1 {
		t.Fatalf("pools: %+v and %+v; the background worker of num 1 runs in the first only", first.Pools, second.Pools)
	}
	for _, share := range []core.State{first, second} {
		http := share.Pools[0]
		if n := num(http.Spec); n.Num != 2 || n.MaxThreads != 3 || http.Generation != 7 {
			t.Errorf("the HTTP worker's share: %s, generation %d", http.Spec, http.Generation)
		}
		if http.Staged == nil || http.Staged.Generation != 8 || num(http.Staged.Spec).Num != 1 {
			t.Errorf("its staged generation: %+v", http.Staged)
		}
	}
	if s.Pools[0].Staged.Spec == nil || num(s.Pools[0].Staged.Spec).Num != 2 {
		t.Error("a share changed the cluster's own state")
	}
	rolling := &proc{slot: 0, noBackground: true}
	if got := c.shareOf(s, rolling); len(got.Pools) != 1 || got.Pools[0].ID != 1 {
		t.Errorf("a child a roll replaces keeps its background worker: %+v", got.Pools)
	}
	debug := c.shareOf(s, &proc{slot: c.debugSlot()})
	if debug.Classic != 3 || debug.MaxThreads != 0 || len(debug.Pools) != 0 {
		t.Errorf("the child of debugged requests: %+v", debug)
	}
}

// num is a JSON number read into an any.
func num(v any) float64 {
	f, _ := v.(float64)
	return f
}
