// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestGlobalOption(t *testing.T) {
	d := caddyfile.NewTestDispenser(`php_worker {
		num_threads 3
		max_threads auto
		max_idle_time 10s
		shared_store_size 4MB
		local_store_size 512KiB
		response_buffer 256KiB
		response_buffer_total 32MB
		request_buffer 512KiB
		request_buffer_total 16MiB
		max_wait_time 2s
		timeout_grace 3s
		max_stuck_threads 4
		processes 3
		cpu_affinity off
		php_ini memory_limit 128M
		php_ini extension redis.so
		php_ini {
			display_errors 0
			error_reporting "E_ALL & ~E_DEPRECATED"
			memory_limit 256M
			extension apcu.so
			zend_extension xdebug.so
		}
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := App{
		NumThreads:          3,
		MaxThreads:          ThreadLimitAuto,
		MaxIdleTime:         caddy.Duration(10 * time.Second),
		SharedStoreSize:     4000000,
		LocalStoreSize:      512 << 10,
		ResponseBuffer:      256 << 10,
		ResponseBufferTotal: 32000000,
		RequestBuffer:       512 << 10,
		RequestBufferTotal:  16 << 20,
		MaxWaitTime:         caddy.Duration(2 * time.Second),
		TimeoutGrace:        caddy.Duration(3 * time.Second),
		MaxStuckThreads:     4,
		Processes:           3,
		CPUAffinity:         "off",
		PHPIni: PHPIni{"memory_limit": {"256M"}, "display_errors": {"0"}, "error_reporting": {"E_ALL & ~E_DEPRECATED"},
			"extension": {"redis.so", "apcu.so"}, "zend_extension": {"xdebug.so"}},
	}
	if !reflect.DeepEqual(app, want) {
		t.Errorf("got %+v, want %+v", app, want)
	}
}

func TestGlobalOptionErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nnum_threads 0\n}":             "positive integer",
		"php_worker {\nnum_threads x\n}":             "positive integer",
		"php_worker {\nnum_threads\n}":               "argument",
		"php_worker {\nmax_wait_time soon\n}":        "duration",
		"php_worker {\nshutdown_timeout -1s\n}":      "shutdown_timeout must be a duration",
		"php_worker {\nphp_ini a\n}":                 "argument",
		"php_worker {\nmax_threads 0\n}":             "max_threads must be a positive integer or auto",
		"php_worker {\nmax_threads many\n}":          "max_threads must be a positive integer or auto",
		"php_worker {\nmax_idle_time 0s\n}":          "max_idle_time must be a positive duration",
		"php_worker {\nshared_store_size 1\n}":       "shared_store_size must be a size of at least 1KiB",
		"php_worker {\nlocal_store_size lots\n}":     "local_store_size must be a size",
		"php_worker {\nresponse_buffer 10\n}":        "response_buffer must be a size of at least 1KiB",
		"php_worker {\nresponse_buffer_total\n}":     "argument",
		"php_worker {\nresponse_buffer_total off\n}": "response_buffer_total must be a size",
		"php_worker {\nresponse_buffer 1MB 2MB\n}":   "argument",
		"php_worker {\nnonsense 1\n}":                "unknown php_worker option",
		"php_worker {\ntimeout_grace 0s\n}":          "timeout_grace must be a positive duration",
		"php_worker {\ntimeout_grace\n}":             "argument",
		"php_worker {\nmax_stuck_threads 0\n}":       "max_stuck_threads must be a positive integer",
		"php_worker {\nprocesses 0\n}":               "processes must be a positive integer",
		"php_worker {\nprocesses\n}":                 "argument",
		"php_worker extra":                           "argument",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

func TestSiteDirective(t *testing.T) {
	d := caddyfile.NewTestDispenser(`php_worker {
		root public
		index app.php
		split .php .phtml
		file_server off
		env APP_ENV production
		env DEBUG 0
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Root != "public" || h.Index != "app.php" || !reflect.DeepEqual(h.SplitPath, []string{".php", ".phtml"}) ||
		!h.DisableFileServer || !reflect.DeepEqual(h.Env, map[string]string{"APP_ENV": "production", "DEBUG": "0"}) {
		t.Errorf("got %+v", h)
	}

	var bare Handler
	if err := bare.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`php_worker`)); err != nil {
		t.Fatalf("bare directive: %v", err)
	}
	if !reflect.DeepEqual(bare, Handler{}) {
		t.Errorf("bare directive set fields: %+v", bare)
	}
}

func TestSiteDirectiveErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nfile_server on\n}":  "off",
		"php_worker {\nenv ONLY_KEY\n}":    "key and a value",
		"php_worker {\nsplit\n}":           "argument",
		"php_worker {\nsplit .p\u0125p\n}": "ASCII",
		"php_worker {\nwat\n}":             "unknown php_worker subdirective",
		"php_worker {\nroot a b\n}":        "argument",
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

// workerFiles creates empty worker scripts in a temporary directory and returns it.
func workerFiles(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("<?php\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestWorkerDirectives(t *testing.T) {
	dir := workerFiles(t, "global.php", "other.php", "index.php", "api.php")
	global, other := filepath.Join(dir, "global.php"), filepath.Join(dir, "other.php")
	d := caddyfile.NewTestDispenser(`php_worker {
		shutdown_timeout 5s
		worker ` + global + ` 3
		worker {
			file ` + other + `
			num 2
			max_requests 500
			max_memory 128MiB
			name api
			env APP_ENV prod
			max_boot_backoff 2s
			max_threads 6
			watch
		}
		worker {
			file ` + global + `
			name watched
			watch src/**/*.php /etc/app/*.ini
		}
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if app.ShutdownTimeout != caddy.Duration(5*time.Second) {
		t.Errorf("shutdown_timeout = %v", app.ShutdownTimeout)
	}
	want := []WorkerConfig{
		{FileName: global, Num: 3},
		{FileName: other, Num: 2, MaxRequests: 500, MaxMemory: 128 << 20, Name: "api", Env: map[string]string{"APP_ENV": "prod"},
			MaxBootBackoff: caddy.Duration(2 * time.Second), MaxThreads: 6, Watch: []string{"**/*.php"}},
		{FileName: global, Name: "watched", Watch: []string{"src/**/*.php", "/etc/app/*.ini"}},
	}
	if !reflect.DeepEqual(app.Workers, want) {
		t.Errorf("workers = %+v, want %+v", app.Workers, want)
	}

	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`php_worker {
		root ` + dir + `
		worker index.php
		worker {
			file api.php
			match /api/* /graphql
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Workers) != 2 || h.Workers[0].FileName != "index.php" ||
		!reflect.DeepEqual(h.Workers[1].MatchPath, []string{"/api/*", "/graphql"}) {
		t.Errorf("site workers = %+v", h.Workers)
	}
}

func TestWorkerDirectiveErrors(t *testing.T) {
	for input, message := range map[string]string{
		"php_worker {\nworker {\nfile a.php\nmatch /x\n}\n}":            "only allowed in a site",
		"php_worker {\nworker a.php zero\n}":                            "positive integer",
		"php_worker {\nworker {\nnum 2\n}\n}":                           "file is required",
		"php_worker {\nworker {\nfile a.php\nmax_threads 0\n}\n}":       "max_threads must be a positive integer",
		"php_worker {\nworker {\nfile a.php\nbogus 1\n}\n}":             "unknown worker subdirective",
		"php_worker {\nworker a.php 1 2\n}":                             "argument",
		"php_worker {\nworker {\nfile a.php\nnum 0\n}\n}":               "num must be a positive integer",
		"php_worker {\nworker {\nfile a.php\nmax_requests -1\n}\n}":     "max_requests must be a non-negative integer",
		"php_worker {\nworker {\nfile a.php\nmax_memory lots\n}\n}":     "max_memory must be a size",
		"php_worker {\nworker {\nfile a.php\nmax_boot_backoff 0s\n}\n}": "max_boot_backoff must be a positive duration",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
}

func TestMissingWorkerFilesAreRefusedWhenAdapting(t *testing.T) {
	dir := workerFiles(t, "present.php")
	if err := os.Mkdir(filepath.Join(dir, "folder.php"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.php")
	for input, message := range map[string]string{
		"php_worker {\nworker " + missing + "\n}":                          "worker file " + missing + " does not exist",
		"php_worker {\nworker " + filepath.Join(dir, "folder.php") + "\n}": "is not a regular file",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("global %q: error %v, want one mentioning %q", input, err, message)
		}
	}
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nworker missing.php\nroot " + dir + "\n}"))
	if err == nil || !strings.Contains(err.Error(), "worker file "+missing+" does not exist") {
		t.Errorf("a site worker is resolved from the directive's root: %v", err)
	}
	var ok Handler
	if err := ok.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nroot " + dir + "\nworker present.php\n}")); err != nil {
		t.Errorf("an existing worker file: %v", err)
	}
}

func TestPlanSplitsThreadsAndKeysPools(t *testing.T) {
	app := &App{NumThreads: 6}
	app.setup(caddy.Context{Context: context.Background()})
	w1 := &WorkerConfig{FileName: "/a.php", Name: "/a.php", Num: 2, poolEnv: [][2]string{{"FRANKENPHP_WORKER", "1"}}}
	w2 := &WorkerConfig{FileName: "/b.php", Name: "/a.php", Num: 1}
	app.addWorkers([]*WorkerConfig{w1, w2}, "")
	defer php.ReleasePool(w1.pool.Key())
	defer php.ReleasePool(w2.pool.Key())
	p, err := app.makePlan()
	if err != nil {
		t.Fatal(err)
	}
	if p.Classic != 3 || len(p.workers) != 2 || len(p.Settings.(engineSettings).PHPIni) != 0 {
		t.Errorf("plan %+v", p)
	}
	if w1.pool.Key() != "/a.php" || w2.pool.Key() != "/a.php#2" || w1.pool.ID() == w2.pool.ID() {
		t.Errorf("duplicate names get unique pools: %+v %+v", w1.pool, w2.pool)
	}
	var spec workerSpec
	if err := json.Unmarshal(w2.spec(), &spec); err != nil || spec.Name != "/a.php#2" || spec.Num != 1 {
		t.Errorf("spec %+v %v", spec, err)
	}
	if again := php.AcquirePool("/a.php"); again != w1.pool {
		t.Error("a second config gets the same pool for the same worker")
	} else {
		php.ReleasePool("/a.php")
	}
	app.NumThreads = 3
	if _, err := app.makePlan(); err == nil || !strings.Contains(err.Error(), "must be greater") {
		t.Errorf("num_threads not above the worker threads: %v", err)
	}
}

func TestPlanMaxThreads(t *testing.T) {
	app := &App{NumThreads: 6}
	app.setup(caddy.Context{Context: context.Background()})
	w := &WorkerConfig{FileName: "/a.php", Name: "/scaled.php", Num: 2}
	app.addWorkers([]*WorkerConfig{w}, "")
	defer php.ReleasePool(w.pool.Key())
	plan := func() (*plan, error) { return app.makePlan() }

	if p, err := plan(); err != nil || p.MaxThreads != 0 || p.MaxIdle != defaultMaxIdleTime {
		t.Errorf("no max_threads anywhere turns autoscaling off: %+v %v", p, err)
	}
	w.MaxThreads = 5
	if p, err := plan(); err != nil || p.MaxThreads != 9 {
		t.Errorf("a worker's max_threads adds its extra threads to num_threads: %+v %v", p, err)
	}
	app.MaxThreads = 16
	if p, err := plan(); err != nil || p.MaxThreads != 16 {
		t.Errorf("max_threads: %+v %v", p, err)
	}
	app.MaxThreads = 5
	if _, err := plan(); err == nil || err.Error() != "max_threads (5) must be at least num_threads (6)" {
		t.Errorf("max_threads below num_threads: %v", err)
	}
	app.MaxThreads = ThreadLimitAuto
	p, err := plan()
	if err != nil || p.MaxThreads < 6 || !strings.Contains(p.maxThreadsWhy, "MiB of memory") {
		t.Errorf("auto: %+v %v", p, err)
	}
}

func TestAutoMaxThreadsDividesMemoryByMemoryLimit(t *testing.T) {
	memory := machineMemory()
	if memory == 0 {
		t.Skip("no /proc/meminfo")
	}
	n, why := autoMaxThreads("256M", 2)
	if want := int(memory * 8 / 10 / (256 << 20)); n != max(want, 2) || !strings.Contains(why, "memory_limit 256M") {
		t.Errorf("256M: %d (%s), want %d", n, why, want)
	}
	if n, why := autoMaxThreads("-1", 2); n != max(int(memory*8/10/(128<<20)), 2) || !strings.Contains(why, "taken as 128M") {
		t.Errorf("unlimited memory_limit: %d (%s)", n, why)
	}
	if n, _ := autoMaxThreads("1T", 3); n < 3 {
		t.Errorf("never below num_threads: %d", n)
	}
	for in, want := range map[string]uint64{"128M": 128 << 20, "1g": 1 << 30, "512K": 512 << 10, "1000": 1000} {
		if got, ok := phpBytes(in); !ok || got != want {
			t.Errorf("phpBytes(%q) = %d %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-1", "M", "12Q"} {
		if _, ok := phpBytes(in); ok {
			t.Errorf("phpBytes(%q) accepted", in)
		}
	}
}

func TestThreadLimitJSON(t *testing.T) {
	var app App
	if err := json.Unmarshal([]byte(`{"max_threads":"auto","max_idle_time":"3s"}`), &app); err != nil || app.MaxThreads != ThreadLimitAuto {
		t.Errorf("auto: %v %v", app.MaxThreads, err)
	}
	if b, _ := json.Marshal(App{MaxThreads: ThreadLimitAuto}); !strings.Contains(string(b), `"max_threads":"auto"`) {
		t.Errorf("marshal auto: %s", b)
	}
	if err := json.Unmarshal([]byte(`{"max_threads":"lots"}`), &app); err == nil {
		t.Error(`"lots" accepted`)
	}
	if err := json.Unmarshal([]byte(`{"max_threads":12}`), &app); err != nil || app.MaxThreads != 12 {
		t.Errorf("12: %v %v", app.MaxThreads, err)
	}
}

func TestResponseBufferOff(t *testing.T) {
	var app App
	if err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nresponse_buffer off\n}")); err != nil {
		t.Fatal(err)
	}
	if !app.UnbufferedResponses || app.ResponseBuffer != 0 {
		t.Errorf("response_buffer off: got %+v", app)
	}
}

func TestRequestBufferOff(t *testing.T) {
	var app App
	if err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\nrequest_buffer off\n}")); err != nil {
		t.Fatal(err)
	}
	if !app.UnbufferedRequests || app.UnbufferedResponses || app.RequestBuffer != 0 {
		t.Errorf("request_buffer off: got %+v", app)
	}
	app = App{RequestBuffer: 8 << 20, RequestBufferTotal: 4 << 20, ResponseBuffer: 1, ResponseBufferTotal: 1}
	if err := app.Validate(); err == nil || !strings.Contains(err.Error(), "must not exceed request_buffer_total") {
		t.Errorf("a per-request bound above the total: error %v", err)
	}
}

func TestTimeoutGraceOff(t *testing.T) {
	var app App
	if err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser("php_worker {\ntimeout_grace off\n}")); err != nil {
		t.Fatal(err)
	}
	if app.TimeoutGrace >= 0 {
		t.Errorf("timeout_grace off: got %v, want a negative duration", app.TimeoutGrace)
	}
	app.setup(caddy.Context{})
	if app.TimeoutGrace >= 0 || app.MaxStuckThreads != defaultMaxStuckThreads {
		t.Errorf("defaults must keep off: got %v, %d", app.TimeoutGrace, app.MaxStuckThreads)
	}
}

func TestProcessesValidation(t *testing.T) {
	for n, ok := range map[int]bool{0: true, 1: true, 2: true, maxProcesses: true, maxProcesses + 1: false, -1: false} {
		app := App{Processes: n}
		if err := app.Validate(); (err == nil) != ok {
			t.Errorf("processes %d: error %v", n, err)
		}
	}
}

func TestCPUAffinityValidation(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "auto": true, "off": true, "on": false, "0-1": false} {
		app := App{Processes: 2, CPUAffinity: v}
		if err := app.Validate(); (err == nil) != ok {
			t.Errorf("cpu_affinity %q: error %v", v, err)
		}
	}
	d := caddyfile.NewTestDispenser(`php_worker {
		cpu_affinity
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err == nil {
		t.Error("cpu_affinity without a value: no error")
	}
}

func TestResponseBufferValidation(t *testing.T) {
	app := App{ResponseBuffer: 8 << 20, ResponseBufferTotal: 4 << 20}
	if err := app.Validate(); err == nil || !strings.Contains(err.Error(), "must not exceed response_buffer_total") {
		t.Errorf("a per-response bound above the total: error %v", err)
	}
	app = App{ResponseBuffer: -1, ResponseBufferTotal: 4 << 20}
	if err := app.Validate(); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("a negative bound: error %v", err)
	}
	app = App{ResponseBuffer: 1 << 20, ResponseBufferTotal: 4 << 20}
	if err := app.Validate(); err != nil {
		t.Errorf("valid bounds refused: %v", err)
	}
}

// TestValidateAsksTheCoreAboutPHPIni: a php_ini line PHP cannot read fails validation
// (`caddy validate`, and a reload before it stops PHP), with the core's reason; a good
// one passes. No PHP starts.
func TestValidateAsksTheCoreAboutPHPIni(t *testing.T) {
	for _, c := range []struct {
		key, value string
		ok         bool
	}{
		{"memory_limit", "256M", true},
		{"extension", "redis.so", true},
		{"a[b]", "1", false},
		{"memory_limit", "256M\nauto_prepend_file=/etc/passwd", false},
	} {
		app := App{PHPIni: PHPIni{}}
		app.PHPIni.Set(c.key, c.value)
		err := app.Validate()
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "is not a valid ini line")) {
			t.Errorf("php_ini %q %q: error %v", c.key, c.value, err)
		}
	}
}
