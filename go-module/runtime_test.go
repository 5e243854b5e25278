// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// These tests run the real PHP engine in the test process, through the same App and
// Handler code a Caddy config runs, calling Start, Stop and Cleanup in the order Caddy
// does on a reload.

// testConfig is a config of one site whose root is dir: an App and a Handler.
type testConfig struct {
	app     *App
	handler *Handler
}

func newTestConfig(t *testing.T, dir string, threads int, ini PHPIni, workers ...WorkerConfig) *testConfig {
	t.Helper()
	ctx := caddy.Context{Context: context.Background()}
	app := &App{NumThreads: threads, PHPIni: ini, ShutdownTimeout: caddy.Duration(5 * time.Second)}
	app.setup(ctx)
	h := &Handler{Root: dir, DisableFileServer: true, Workers: workers}
	if err := h.setup(ctx, app); err != nil {
		t.Fatal(err)
	}
	return &testConfig{app: app, handler: h}
}

// cleanup is Caddy's Cleanup of the config.
func (c *testConfig) cleanup() {
	_ = c.handler.Cleanup()
	_ = c.app.Cleanup()
}

// serve runs a GET through the handler; the result arrives on the channel.
func (c *testConfig) serve(path string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil)
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
		if err := c.handler.ServeHTTP(rec, r, next); err != nil {
			rec.Code = 599
			rec.Body.WriteString(err.Error())
		}
		out <- rec
	}()
	return out
}

func (c *testConfig) get(t *testing.T, path string) string {
	t.Helper()
	select {
	case rec := <-c.serve(path):
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
		}
		return rec.Body.String()
	case <-time.After(20 * time.Second):
		t.Fatalf("GET %s: no answer", path)
		return ""
	}
}

// eventually retries get until it answers want.
func (c *testConfig) eventually(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got := c.get(t, path); got != want; got = c.get(t, path) {
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %q, want %q", path, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writePHP(t *testing.T, path, code string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("<?php\n"+code), 0o644); err != nil {
		t.Fatal(err)
	}
}

// versionedWorker writes a worker answering its version, read when it boots.
func versionedWorker(t *testing.T, path, version string) {
	writePHP(t, path, "$v = '"+version+"'; while (frankenphp_handle_request(function () use ($v) { echo $v; })) {}")
}

func worker(name string, num int) WorkerConfig {
	return WorkerConfig{FileName: "worker.php", Name: name, Num: num, MatchPath: []string{"/w"}}
}

func TestARequestBeforeTheAppStartsWaitsForIt(t *testing.T) {
	dir := t.TempDir()
	versionedWorker(t, filepath.Join(dir, "worker.php"), "worker")
	writePHP(t, filepath.Join(dir, "classic.php"), "echo 'classic';")
	c := newTestConfig(t, dir, 3, nil, worker("early", 1))
	defer c.cleanup()

	early, classic := c.serve("/w"), c.serve("/classic.php")
	select {
	case rec := <-early:
		t.Fatalf("answered before PHP started: %d %s", rec.Code, rec.Body.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.app.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.app.Stop()
	for _, tc := range []struct {
		answer <-chan *httptest.ResponseRecorder
		want   string
	}{{early, "worker"}, {classic, "classic"}} {
		select {
		case rec := <-tc.answer:
			if rec.Code != http.StatusOK || rec.Body.String() != tc.want {
				t.Errorf("got %d %q, want %q from the right pool", rec.Code, rec.Body.String(), tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the waiting request was never served")
		}
	}
}

func TestAReloadStagesWorkersUntilTheOldConfigStops(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.php")
	versionedWorker(t, file, "v1")
	old := newTestConfig(t, dir, 3, nil, worker("app", 1))
	if err := old.app.Start(); err != nil {
		t.Fatal(err)
	}
	if got := old.get(t, "/w"); got != "v1" {
		t.Fatalf("got %q", got)
	}
	engine := php.Engine()

	// A reload: the new config provisions and starts while the old one serves.
	versionedWorker(t, file, "v2")
	next := newTestConfig(t, dir, 4, nil, worker("app", 2))
	if next.handler.Workers[0].pool != old.handler.Workers[0].pool {
		t.Fatal("a worker kept by the new config keeps its pool")
	}
	if err := next.app.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the staged scripts booted", func() bool {
		standby := 0
		for _, th := range statsOf(t).Threads {
			if th.State == "standby" {
				standby++
			}
		}
		return standby == 2
	})
	for range 5 {
		if got := next.get(t, "/w"); got != "v1" {
			t.Fatalf("a staged generation served: %q", got)
		}
	}
	// Caddy stops the old config, then cleans it up: the new one is committed.
	if err := old.app.Stop(); err != nil {
		t.Fatal(err)
	}
	old.cleanup()
	defer next.cleanup()
	defer next.app.Stop()
	next.eventually(t, "/w", "v2")
	if php.Engine() != engine {
		t.Error("a reload that keeps php_ini keeps the engine")
	}
	if current, pending := php.Plans(); current != next.app.runtimePlan() || pending != nil {
		t.Error("the new config owns PHP")
	}
	if got, _ := php.CommittedSpec(next.handler.Workers[0].pool); string(got) != string(next.handler.Workers[0].spec()) {
		t.Errorf("committed spec %s", got)
	}
}

func TestAConfigWhoseLoadFailsLeavesPHPAsItWas(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.php")
	writePHP(t, file, "$n = 0; while (frankenphp_handle_request(function () use (&$n) { echo ++$n; })) {}")
	writePHP(t, filepath.Join(dir, "other.php"), "while (frankenphp_handle_request(function () { echo 'other'; })) {}")
	current := newTestConfig(t, dir, 3, nil, worker("counter", 1))
	if err := current.app.Start(); err != nil {
		t.Fatal(err)
	}
	defer current.cleanup()
	defer current.app.Stop()
	if got := current.get(t, "/w"); got != "1" {
		t.Fatalf("got %q", got)
	}

	// Started, then stopped and cleaned up because another app failed to start.
	other := WorkerConfig{FileName: "other.php", Name: "other", Num: 1, MatchPath: []string{"/o"}}
	failed := newTestConfig(t, dir, 6, PHPIni{"memory_limit": {"64M"}}, worker("counter", 2), other)
	failedPool := failed.handler.Workers[1].pool
	if err := failed.app.Start(); err != nil {
		t.Fatal(err)
	}
	if err := failed.app.Stop(); err != nil {
		t.Fatal(err)
	}
	failed.cleanup()

	if got := current.get(t, "/w"); got != "2" {
		t.Errorf("the worker kept its state: got %q", got)
	}
	if cur, pending := php.Plans(); cur != current.app.runtimePlan() || pending != nil {
		t.Error("the running config still owns PHP")
	}
	if _, ok := php.CommittedSpec(failedPool); ok {
		t.Error("the pool only the failed config used is gone")
	}
	stats := statsOf(t)
	if len(stats.Threads) != 3 {
		t.Errorf("threads %+v", stats.Threads)
	}
}

func TestAPHPIniChangeRestartsPHPWhenTheConfigIsCommitted(t *testing.T) {
	dir := t.TempDir()
	writePHP(t, filepath.Join(dir, "ini.php"), "echo ini_get('memory_limit');")
	old := newTestConfig(t, dir, 2, PHPIni{"memory_limit": {"64M"}})
	if err := old.app.Start(); err != nil {
		t.Fatal(err)
	}
	engine := php.Engine()
	next := newTestConfig(t, dir, 2, PHPIni{"memory_limit": {"96M"}})
	if err := next.app.Start(); err != nil {
		t.Fatal(err)
	}
	if php.Engine() != engine || next.get(t, "/ini.php") != "64M" {
		t.Error("PHP restarts only when the new config is committed")
	}
	if err := old.app.Stop(); err != nil {
		t.Fatal(err)
	}
	old.cleanup()
	defer next.cleanup()
	defer next.app.Stop()
	if php.Engine() == engine {
		t.Error("a php_ini change restarts PHP")
	}
	if got := next.get(t, "/ini.php"); got != "96M" {
		t.Errorf("memory_limit = %q after the restart", got)
	}
}

func waitFor(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type testStats struct {
	Threads []struct {
		State  string `json:"state"`
		Worker string `json:"worker"`
	} `json:"threads"`
}

func statsOf(t *testing.T) testStats {
	t.Helper()
	raw, err := php.Engine().StatsJSON()
	if err != nil {
		t.Fatal(err)
	}
	var s testStats
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestARequestForARemovedWorkerIsRefusedAtOnce: a config's handler that still gets a
// request for its worker after the worker was removed (the old config of a reload that
// dropped it) answers 503 at once, not after waiting 30 s for the pool.
func TestARequestForARemovedWorkerIsRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	versionedWorker(t, filepath.Join(dir, "worker.php"), "v1")
	c := newTestConfig(t, dir, 3, nil, worker("dropped", 1))
	if err := c.app.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.app.Stop()
	defer c.app.Cleanup()
	c.eventually(t, "/w", "v1")
	_ = c.handler.Cleanup() // the last config using the worker: its pool is deleted
	select {
	case rec := <-c.serve("/w"):
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "was removed by a config change") {
			t.Errorf("got %d %q, want 503 naming the removal", rec.Code, rec.Body.String())
		}
	case <-time.After(10 * time.Second): // a tenth of the 30 s a request waits for its pool
		t.Fatal("the request waited for a pool that was removed for good")
	}
}
