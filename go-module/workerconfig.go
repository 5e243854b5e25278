// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/php-worker/php_worker/go-module/internal/request"
)

// WorkerConfig is a worker script: PHP boots it once per thread and it serves requests
// through frankenphp_handle_request(), so an application's bootstrap runs once instead
// of on every request.
type WorkerConfig struct {
	// The worker script. In a site, a relative path is relative to the php_worker root
	// when that root has no placeholders, else to Caddy's working directory. A file that
	// does not exist or cannot be read is refused when the config is adapted or loaded.
	FileName string `json:"file_name,omitempty"`

	// Threads running the script. Default: 2 × the number of CPUs.
	Num int `json:"num,omitempty"`

	// Most threads autoscaling may give this worker (at least num). Default: no limit
	// of its own; the app's max_threads still bounds all threads. Setting it turns
	// autoscaling on even without the app's max_threads.
	MaxThreads int `json:"max_threads,omitempty"`

	// Restart the script after it served this many requests. Default: 0, never.
	MaxRequests int `json:"max_requests,omitempty"`

	// Restart the script after a request when its PHP memory (memory_get_usage(true),
	// measured when it asks for the next request) is above this many bytes, the way
	// max_requests restarts it: no request fails, and the log names the memory and the
	// routes whose requests grew it most (the thread list shows that growth per worker
	// too). A request that reaches memory_limit still ends as a fault. Default: 0, never.
	MaxMemory int64 `json:"max_memory,omitempty"`

	// Name used in logs and the admin API's thread list, and the worker's identity
	// across config reloads: a reload restarts the worker of the same name beside the
	// running one, which keeps serving until the new script is ready. Default: the
	// absolute path of the script.
	Name string `json:"name,omitempty"`

	// Extra $_SERVER and getenv() values, while the script boots and in every request.
	// A site's worker also gets the site's env; the worker's own values win.
	Env map[string]string `json:"env,omitempty"`

	// Requests whose path matches one of these go to this worker whatever the file
	// system holds. Site workers only.
	MatchPath []string `json:"match_path,omitempty"`

	// Longest pause between two boot attempts of a script that fails before it reaches
	// frankenphp_handle_request(). Pauses start at 100ms and double. Default: 5s.
	MaxBootBackoff caddy.Duration `json:"max_boot_backoff,omitempty"`

	// Restart the worker, the way a reload does, when files matching these globs change
	// (changes within 150ms count as one). Globs are relative to the site root (for a
	// global worker, to the script's directory) or absolute; ** matches any number of
	// folders. Hidden folders, vendor and node_modules are skipped unless a glob names
	// them. In the Caddyfile, `watch` alone means **/*.php. Default: no watching.
	Watch []string `json:"watch,omitempty"`

	// FrankenPHP's: how many boot failures in a row end the server. php_worker never
	// gives up on a worker that fails to boot: it retries with a backoff (see
	// max_boot_backoff) and answers its requests 503 meanwhile, which FrankenPHP calls
	// -1. So -1 (or leaving it out) is the only value taken.
	MaxConsecutiveFailures int `json:"max_consecutive_failures,omitempty"`

	kind        workerKind       // set by the list the config is in (App.Background, App.TaskWorkers)
	stopTimeout time.Duration    // a background script's time to stop: the app's shutdown_timeout
	argv        []string         // a scheduled job's command line (schedule.go)
	pool        *phpruntime.Pool // the pool this config holds, from its Provision to its Cleanup
	released    bool
	watchRoot   string // what relative Watch globs are relative to
	// The env: FRANKENPHP_WORKER=1, the inherited env and its own (own wins), sorted,
	// in two parts. poolEnv, the values without placeholders, goes once to the core in
	// the pool's spec; requestEnv, the values with placeholders, is replaced for and sent
	// with each request. Their names are disjoint.
	poolEnv    [][2]string
	requestEnv [][2]string
	oneShotEnv [][2]string // both, in the order a worker's request sees them (debug.go)
	matcher    caddyhttp.MatchPath
}

// workerKind is what a worker script does with its threads (rust-core's WorkerKind).
type workerKind string

const (
	kindHTTP       workerKind = "http"       // serves requests: frankenphp_handle_request()
	kindTask       workerKind = "task"       // runs tasks: php_worker_handle_task()
	kindBackground workerKind = "background" // runs its own loop, or is a scheduled job
)

// describe names the worker in errors: "worker x", "task worker x", "background worker x".
func (w *WorkerConfig) describe() string {
	switch w.kind {
	case kindTask:
		return "task worker " + w.Name
	case kindBackground:
		return "background worker " + w.Name
	}
	return "worker " + w.Name
}

// watchDebounce is how long file changes must pause before a watched worker restarts:
// a deploy or a save writes several files.
const watchDebounce = 150 * time.Millisecond

// provision makes the file absolute (relative to base), fills defaults and prepares
// the environment; inherited is the site's env.
func (w *WorkerConfig) provision(ctx caddy.Context, base string, inherited map[string]string) error {
	if w.FileName == "" {
		return fmt.Errorf("worker: a file is required")
	}
	abs, err := workerFile(w.FileName, base)
	if err != nil {
		return err
	}
	w.FileName = abs
	if w.Name == "" {
		w.Name = abs
	}
	if w.Num == 0 && w.kind == kindBackground {
		w.Num = 1 // a loop of its own: one copy unless asked
	} else if w.Num == 0 {
		w.Num = 2 * core.CPUs()
	}
	if w.kind == "" {
		w.kind = kindHTTP
	}
	if w.MaxConsecutiveFailures != 0 && w.MaxConsecutiveFailures != -1 {
		return fmt.Errorf("worker %s: max_consecutive_failures %d: php_worker never gives up on a worker that fails "+
			"to boot, it retries with a backoff up to max_boot_backoff (FrankenPHP's -1); only -1 is accepted", w.Name, w.MaxConsecutiveFailures)
	}
	if w.Num < 0 || w.MaxRequests < 0 || w.MaxBootBackoff < 0 || w.MaxThreads < 0 || w.MaxMemory < 0 {
		return fmt.Errorf("worker %s: num, max_threads, max_requests, max_memory and max_boot_backoff must not be negative", w.Name)
	}
	if w.kind == kindBackground && (w.MaxThreads != 0 || w.MaxRequests != 0 || w.MaxMemory != 0 || len(w.MatchPath) > 0) {
		return fmt.Errorf("%s: max_threads, max_requests, max_memory and match are settings of workers that take requests",
			w.describe())
	}
	if w.MaxThreads != 0 && w.MaxThreads < w.Num {
		return fmt.Errorf("worker %s: max_threads (%d) must be at least num (%d)", w.Name, w.MaxThreads, w.Num)
	}
	w.watchRoot = base
	if w.watchRoot == "" {
		w.watchRoot = filepath.Dir(abs)
	}
	for _, g := range w.Watch {
		if err := phpruntime.CheckWatchGlob(w.watchRoot, g); err != nil {
			return fmt.Errorf("worker %s: %w", w.Name, err)
		}
	}
	if err := request.CheckEnv(w.Env); err != nil {
		return fmt.Errorf("worker %s: %w", w.Name, err)
	}
	merged := map[string]string{}
	for k, v := range inherited {
		merged[k] = v
	}
	for k, v := range w.Env {
		merged[k] = v
	}
	if w.kind == kindHTTP {
		// What FrankenPHP's worker scripts (Symfony Runtime's, Octane's) look for; a
		// background or task script that found it would start an HTTP loop.
		merged["FRANKENPHP_WORKER"] = "1"
	}
	w.poolEnv, w.requestEnv = nil, nil
	for _, kv := range sortedPairs(merged) {
		if request.HasPlaceholder(kv[1]) {
			w.requestEnv = append(w.requestEnv, kv)
		} else {
			w.poolEnv = append(w.poolEnv, kv)
		}
	}
	w.oneShotEnv = append(append([][2]string(nil), w.poolEnv...), w.requestEnv...)
	if len(w.MatchPath) > 0 {
		w.matcher = caddyhttp.MatchPath(w.MatchPath)
		if err := w.matcher.Provision(ctx); err != nil {
			return fmt.Errorf("worker %s: match: %w", w.Name, err)
		}
	}
	return nil
}

// workerFile is the absolute path of a worker script, relative ones taken from base
// (else from the working directory), symlinks resolved. A file that does not exist or
// cannot be read is refused, naming it: no config gets to boot-loop on a typo.
func workerFile(file, base string) (string, error) {
	if !filepath.IsAbs(file) && base != "" {
		file = filepath.Join(base, file)
	}
	abs, err := caddy.FastAbs(file)
	if err != nil {
		return "", fmt.Errorf("worker %q: %w", file, err)
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	f, err := os.Open(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("worker file %s does not exist", abs)
	case err != nil:
		return "", fmt.Errorf("worker file %s cannot be read: %w", abs, errors.Unwrap(err))
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return "", fmt.Errorf("worker file %s is not a regular file", abs)
	}
	if _, err := f.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("worker file %s cannot be read: %w", abs, err)
	}
	return abs, nil
}

// releasePool drops the config's reference to the worker's pool, once. The pointer
// stays: a request still running in a config being cleaned up keeps a valid id (its
// pool, gone, answers it 503 after the wait).
func (w *WorkerConfig) releasePool() {
	if w.pool != nil && !w.released {
		w.released = true
		w.pool.Release()
	}
}

func (w *WorkerConfig) matches(r *http.Request) bool {
	return len(w.MatchPath) > 0 && w.matcher.Match(r)
}

func sortedPairs(m map[string]string) [][2]string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([][2]string, 0, len(keys))
	for _, k := range keys {
		pairs = append(pairs, [2]string{k, m[k]})
	}
	return pairs
}

// checkUniqueFiles refuses a worker file listed twice in one scope, unless the workers
// sharing it route requests by match (requests resolved to the file itself go to the
// one without match, see Handler.workerFor).
func checkUniqueFiles(scope string, workers []*WorkerConfig) error {
	seen := map[string]bool{}
	for _, w := range workers {
		if len(w.MatchPath) > 0 {
			continue
		}
		if seen[w.FileName] {
			return fmt.Errorf("%s: worker file %s is listed twice", scope, w.FileName)
		}
		seen[w.FileName] = true
	}
	return nil
}

// parseWorker reads `worker <file> [<num>|watch]` or a worker block:
//
//	worker {
//		file <path>
//		num <n>
//		max_threads <n>
//		max_requests <n>
//		max_memory <size>
//		name <name>
//		env <key> <value>
//		match <path...>
//		max_boot_backoff <duration>
//		watch [<glob>...]
//		max_consecutive_failures -1
//	}
//
// max_consecutive_failures is FrankenPHP's; php_worker keeps booting a script that
// fails before it serves (with backoff, see max_boot_backoff), which FrankenPHP calls -1,
// so that is the only value it takes. dl names the block the worker is written in.
func parseWorker(d *caddyfile.Dispenser, allowMatch bool, dl dialect) (WorkerConfig, error) {
	var w WorkerConfig
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
	case 1, 2:
		w.FileName = args[0]
		if len(args) == 2 && args[1] == "watch" {
			w.Watch = []string{phpruntime.DefaultWatchGlob}
		} else if len(args) == 2 {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return w, d.Errf("worker %s: the thread count must be a positive integer, got %q", args[0], args[1])
			}
			w.Num = n
		}
	default:
		return w, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "file":
			if !d.AllArgs(&w.FileName) {
				return w, d.ArgErr()
			}
		case "num":
			n, err := intArg(d, 1)
			if err != nil {
				return w, err
			}
			w.Num = n
		case "max_requests":
			n, err := intArg(d, 0)
			if err != nil {
				return w, err
			}
			w.MaxRequests = n
		case "max_memory":
			var v string
			if !d.AllArgs(&v) {
				return w, d.ArgErr()
			}
			n, err := parseSize(d, "max_memory", v)
			if err != nil {
				return w, err
			}
			w.MaxMemory = n
		case "name":
			if !d.AllArgs(&w.Name) {
				return w, d.ArgErr()
			}
		case "env":
			if err := parseEnv(d, &w.Env); err != nil {
				return w, err
			}
		case "match":
			if !allowMatch {
				return w, d.Errf("worker match is only allowed in a site's php_worker (or php_server) directive")
			}
			w.MatchPath = d.RemainingArgs()
			if len(w.MatchPath) == 0 {
				return w, d.ArgErr()
			}
		case "max_boot_backoff":
			dur, err := durationArg(d, true)
			if err != nil {
				return w, err
			}
			w.MaxBootBackoff = dur
		case "max_threads":
			n, err := intArg(d, 1)
			if err != nil {
				return w, err
			}
			w.MaxThreads = n
		case "watch":
			// Lines add up: Octane writes one `watch <path>` line per path.
			globs := d.RemainingArgs()
			if len(globs) == 0 {
				globs = []string{phpruntime.DefaultWatchGlob}
			}
			w.Watch = append(w.Watch, globs...)
		case "max_consecutive_failures":
			var v string
			if !d.AllArgs(&v) {
				return w, d.ArgErr()
			}
			if v != "-1" {
				// provision says the same of a JSON config.
				return w, d.Errf("worker max_consecutive_failures %s: php_worker never gives up on a worker that fails "+
					"to boot, it retries with a backoff up to max_boot_backoff (FrankenPHP's -1); only -1 is accepted", v)
			}
		default:
			return w, d.Errf("unknown worker subdirective %q in %s (known: file, num, max_threads, max_requests, max_memory, name, env, match, max_boot_backoff, watch, max_consecutive_failures)", name, dl)
		}
	}
	if w.FileName == "" {
		return w, d.Errf("worker: a file is required")
	}
	if strings.ContainsRune(w.FileName, 0) {
		return w, d.Errf("worker: invalid file name")
	}
	return w, nil
}

// workerSpec is the JSON read by php_worker_pool_new (rust-core/src/config.rs).
type workerSpec struct {
	Name             string           `json:"name"`
	File             string           `json:"file"`
	Num              int              `json:"num"`
	MaxThreads       int              `json:"max_threads,omitempty"`
	MaxRequests      int              `json:"max_requests,omitempty"`
	MaxMemory        int64            `json:"max_memory,omitempty"`
	MaxBootBackoffMS int64            `json:"max_boot_backoff_ms,omitempty"`
	Boot             request.BootSpec `json:"boot"`
	// The env without placeholders, once for the pool (rust-core's WorkerSpec.env).
	Env           [][2]string `json:"env,omitempty"`
	Kind          workerKind  `json:"kind,omitempty"`
	StopTimeoutMS int64       `json:"stop_timeout_ms,omitempty"`
	Argv          []string    `json:"argv,omitempty"`
}

// spec is what the core boots the worker with.
func (w *WorkerConfig) spec() []byte {
	b, err := json.Marshal(workerSpec{
		Name: w.specName(), File: w.FileName, Num: w.Num, MaxThreads: w.MaxThreads, MaxRequests: w.MaxRequests,
		MaxMemory: w.MaxMemory, MaxBootBackoffMS: time.Duration(w.MaxBootBackoff).Milliseconds(),
		Boot: request.BootRequest(w.FileName, w.requestEnv), Env: w.poolEnv, Kind: w.kind, StopTimeoutMS: w.stopTimeout.Milliseconds(), Argv: w.argv,
	})
	if err != nil {
		panic(err) // strings and numbers always marshal
	}
	return b
}

// specName is the worker's name for the core: its pool's key (unique in a config), or
// its own name for a scheduled job, which has no pool.
func (w *WorkerConfig) specName() string {
	if w.pool != nil {
		return w.pool.Key()
	}
	return w.Name
}
