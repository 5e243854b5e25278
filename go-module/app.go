// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/php-worker/php_worker/go-module/internal/request"
	"go.uber.org/zap"
)

// maxProcesses bounds the processes option: each child runs a whole PHP.
const maxProcesses = 64

// The values of cpu_affinity.
const (
	cpuAffinityAuto = "auto"
	cpuAffinityOff  = "off"
)

// App is the php_worker app: the PHP settings of a config and its workers. PHP starts
// in Start (never in Provision, so `caddy validate` and `caddy adapt` start no PHP) and
// keeps running across config reloads: a reload restarts the workers (new PHP code is
// served) and resizes the classic pool, and restarts PHP itself only when php_ini
// changes (see runtime.go).
type App struct {
	// Number of PHP threads, worker threads included. Default: 2 × the number of CPUs,
	// or the worker threads plus one if that is more.
	NumThreads int `json:"num_threads,omitempty"`

	// Most PHP threads autoscaling may run, workers included: while requests wait for
	// a thread and the CPU has room, threads are added to the pool they wait for. A
	// number of at least num_threads, or "auto": what memory allows, the machine's
	// memory (or its cgroup's limit) divided by PHP's memory_limit, with 20% kept for
	// the rest; the log says what it chose. Default: num_threads plus what the workers'
	// own max_threads add (no autoscaling when none is set).
	MaxThreads ThreadLimit `json:"max_threads,omitempty"`

	// Runs PHP in this many supervised child processes, each with its share of the
	// threads (num_threads, max_threads and each worker's num are divided among them,
	// at least one each; a background worker's num is divided without that minimum): a
	// crash in one (a faulty extension, the OOM killer) costs only the requests it was
	// running, answered 502, and the process is replaced. The Caddy process stays the
	// one HTTP server and keeps the shared table, which every child reaches over its
	// socket. Changing it restarts PHP, as a php_ini change does; a php_ini change
	// restarts the processes one at a time. See docs/processes.md. Default: 1, PHP in
	// the Caddy process.
	Processes int `json:"processes,omitempty"`

	// Where the children of processes N run: "auto" gives each child CPUs of its own
	// among those the server may use (whole cores, next to one another), when there are
	// at least as many CPUs as children, so each child's PHP code stays warm in its CPU's
	// caches; "off" lets the kernel place every thread. The Caddy process and the child
	// of debugged requests run on every CPU either way; requests go to the least busy
	// child, so a child whose CPUs are taken by other work gets fewer. Changing it
	// restarts PHP. Default: auto.
	CPUAffinity string `json:"cpu_affinity,omitempty"`

	// After this many requests a PHP thread starts a fresh PHP context, classic and
	// worker threads alike (a worker's script ends first, as with its own max_requests,
	// and boots again on the fresh context): what extensions leak in a thread's own
	// storage goes with it. FrankenPHP's global max_requests. Changing it restarts PHP,
	// as a php_ini change does. Default: 0, never.
	MaxRequests int `json:"max_requests,omitempty"`

	// How long a thread added by autoscaling may wait for a request before it ends.
	// Default: 5s.
	MaxIdleTime caddy.Duration `json:"max_idle_time,omitempty"`

	// How long a request may wait for a free PHP thread before it is answered
	// 503 with a Retry-After header. Only time during which no thread of its pool is
	// free counts: a request handed to a free thread is never refused. Default: 0,
	// wait as long as the client does.
	MaxWaitTime caddy.Duration `json:"max_wait_time,omitempty"`

	// On shutdown, how long running scripts may take to finish before they are stopped
	// the way max_execution_time stops them. Default: 30s.
	ShutdownTimeout caddy.Duration `json:"shutdown_timeout,omitempty"`

	// How long a request may run past its PHP time limit (max_execution_time, or what
	// set_time_limit() set) before php_worker ends it from outside PHP: its client gets
	// 504 (or a cut-off response when the headers already left), its pool gets a
	// replacement thread, and the stuck thread is woken (PHP's timer signal again, and
	// the socket, pipe or child process its blocking call waits on is ended) until it
	// comes back. A script with no time limit (max_execution_time 0) is never ended.
	// Default: 5s; a negative value (Caddyfile: timeout_grace off) turns it off.
	TimeoutGrace caddy.Duration `json:"timeout_grace,omitempty"`

	// Most threads that may be stuck at once with a replacement each: past it, a stuck
	// thread gets none (its pool serves with one thread less until it comes back), and
	// the log says so. Default: 16.
	MaxStuckThreads int `json:"max_stuck_threads,omitempty"`

	// Capacity of the table shared by all PHP threads (php_worker_shared_*), in bytes:
	// when full, puts fail and the log says so; no live entry is evicted. Default: 64MiB.
	SharedStoreSize int64 `json:"shared_store_size,omitempty"`

	// Capacity of each PHP thread's local store (php_worker_local_*), in bytes.
	// Default: 16MiB.
	LocalStoreSize int64 `json:"local_store_size,omitempty"`

	// Memory one response may hold while its client is slower than PHP, in bytes: PHP
	// never waits on a client, and past this bound the rest of the response waits in a
	// temporary file (in $TMPDIR, deleted when the response ends). Default: 1MiB.
	ResponseBuffer int64 `json:"response_buffer,omitempty"`

	// Memory all responses together may hold that way, in bytes: past it, responses
	// spill to their files sooner. Default: 64MiB.
	ResponseBufferTotal int64 `json:"response_buffer_total,omitempty"`

	// Turns response buffering off: PHP threads write responses to the client
	// themselves, as FrankenPHP does. That saves copying each body once (large
	// responses are faster), but a client slower than PHP then holds a PHP thread:
	// only for a server behind a proxy that buffers responses itself, such as nginx
	// with its defaults. Under processes N it does not apply: a child's PHP threads
	// cannot write to the client, so their responses are buffered all the same.
	// Caddyfile: response_buffer off.
	UnbufferedResponses bool `json:"unbuffered_responses,omitempty"`

	// Memory one request body may take while it is read before PHP runs, in bytes: a
	// PHP thread is taken only once the whole body has arrived, and past this bound the
	// rest of it waits in a temporary file (in $TMPDIR, deleted when the request ends).
	// So slow uploads hold goroutines and disk, never PHP threads, and a client that
	// stalls is ended by Caddy's read timeouts (timeouts read_body) with 408. Default:
	// 1MiB. Bodies of up to 64KiB always travel with the request. At most PHP's
	// post_max_size is read ahead: a larger body streams to PHP (which refuses a POST
	// that large without reading it).
	RequestBuffer int64 `json:"request_buffer,omitempty"`

	// Memory all request bodies together may take that way, in bytes: past it, bodies
	// spill to their files sooner. Default: 64MiB.
	RequestBufferTotal int64 `json:"request_buffer_total,omitempty"`

	// Turns request buffering off: PHP reads bodies larger than 64KiB from the client
	// as it goes, as FrankenPHP does. That suits an app that reads a large upload as a
	// stream (php://input) and wants its first bytes early, or a server behind a proxy
	// that buffers uploads itself (nginx with its defaults); otherwise a slow upload
	// holds a PHP thread for as long as it lasts. Caddyfile: request_buffer off.
	UnbufferedRequests bool `json:"unbuffered_requests,omitempty"`

	// php.ini settings, applied after the php.ini files PHP reads. A value is a string;
	// extension and zend_extension also take a list, loaded in order (PHP loads every
	// such line; any other setting keeps its last value). Changing them on a reload
	// restarts PHP (requests wait meanwhile).
	PHPIni PHPIni `json:"php_ini,omitempty"`

	// Debug triggers: the names of the cookies, query parameters, headers or form
	// fields that make a request to an HTTP worker run in a request of its own, for a
	// debugger or profiler to act on it. Such a request runs the worker script on a
	// classic thread, booting the app for it; requests without a trigger go to the
	// booted workers. Off by default: any client could otherwise make the server boot
	// the app for its request. ["auto"] takes the triggers of the debuggers and
	// profilers php_ini loads (Xdebug: XDEBUG_SESSION, XDEBUG_SESSION_START,
	// XDEBUG_TRIGGER, XDEBUG_PROFILE, XDEBUG_TRACE; SPX: SPX_ENABLED, SPX_KEY;
	// Blackfire: X-Blackfire-Query; Tideways: X-Tideways-Profiler, _tideways); a list
	// of names takes those; ["off"] is the default. A name with '_' or '.' is not looked
	// up as a header: PHP never sees such headers.
	DebugTriggers []string `json:"debug_triggers,omitempty"`

	// The value a debug trigger must carry to count, compared in constant time: with
	// it, only clients that know it can pull a trigger. Give Xdebug the same value
	// (php_ini xdebug.trigger_value), so it acts on the same requests. Default: any
	// value counts.
	DebugTriggerValue string `json:"debug_trigger_value,omitempty"`

	// Workers serving any site whose resolved script is their file. Relative files are
	// relative to Caddy's working directory; match is not allowed here.
	Workers []WorkerConfig `json:"workers,omitempty"`

	// Background workers: scripts that run a loop of their own (a queue consumer, a
	// socket listener, a metrics pusher) on PHP threads of their own, num copies at
	// once (default 1), and take no requests. A script that ends runs again, 100ms later, or after a
	// pause that doubles up to max_boot_backoff while it keeps ending within a second.
	// Reloads, the admin API's restart and watched files restart it with the new code:
	// the running copy is told to stop (php_worker_stopping(), php_worker_wait_stop(),
	// php_worker_on_stop()), is stopped the way a timeout stops a script if it has not
	// ended after shutdown_timeout, and the new one starts once it ended. It runs with
	// no time limit; its output and errors go to the log under its name. Settings: file,
	// name, num, env, watch, max_boot_backoff.
	Background []WorkerConfig `json:"background,omitempty"`

	// Task workers: scripts that boot once per thread, like workers, and loop on
	// php_worker_handle_task($handler) to run the tasks any PHP thread sends them with
	// php_worker_task($name, $payload) or, several at once on as many threads,
	// php_worker_tasks($name, $payloads). Requests never reach them. Settings: those of a
	// worker but match.
	TaskWorkers []WorkerConfig `json:"task_workers,omitempty"`

	// Scheduled jobs: PHP scripts run with a command line ($argv) on a PHP thread of their
	// own at the times of a cron expression, never two runs of one job at once.
	Schedules []ScheduleConfig `json:"schedules,omitempty"`

	ctx       caddy.Context
	logger    *zap.Logger
	rt        *phpruntime.Runtime // the process's PHP, which this config drives
	registry  *workerRegistry
	exit      *exitState
	plan      *plan                 // set by Start
	watchers  []*phpruntime.Watcher // from Start to Stop
	scheduler *scheduler            // from Start to Stop
}

// workerRegistry holds the workers of one config: the global ones and those the site
// handlers register while they provision, each with the pool it holds.
type workerRegistry struct {
	mu          sync.Mutex
	all         []*WorkerConfig
	names       map[string]int             // workers per name, to make pool keys unique
	globalFiles map[string]*WorkerConfig   // global workers by absolute file
	groups      map[string]frankenPHPGroup // FrankenPHP handler groups (frankenphphandler.go)
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "php_worker",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision sets defaults and prepares the global workers. It starts nothing.
func (a *App) Provision(ctx caddy.Context) error {
	a.setup(ctx)
	globals := make([]*WorkerConfig, 0, len(a.Workers))
	for i := range a.Workers {
		w := &a.Workers[i]
		if len(w.MatchPath) > 0 {
			return fmt.Errorf("global worker %s: match is only allowed in a site's php_worker directive", w.FileName)
		}
		if err := w.provision(ctx, "", nil); err != nil {
			return err
		}
		globals = append(globals, w)
	}
	if err := checkUniqueFiles("php_worker global option", globals); err != nil {
		return err
	}
	for _, w := range globals {
		a.registry.globalFiles[w.FileName] = w
	}
	// Background and task workers take no requests: they are not in globalFiles.
	for i := range a.Background {
		w := &a.Background[i]
		w.kind, w.stopTimeout = kindBackground, time.Duration(a.ShutdownTimeout)
		if err := w.provision(ctx, "", nil); err != nil {
			return err
		}
		globals = append(globals, w)
	}
	for i := range a.TaskWorkers {
		w := &a.TaskWorkers[i]
		w.kind = kindTask
		if len(w.MatchPath) > 0 {
			return fmt.Errorf("task worker %s: match is only for workers that serve requests", w.FileName)
		}
		if err := w.provision(ctx, "", nil); err != nil {
			return err
		}
		globals = append(globals, w)
	}
	if err := a.provisionSchedules(); err != nil {
		return err
	}
	if t := a.debugTriggers(); t != nil {
		a.logger.Info("debug triggers are on: a worker request carrying one runs in a request of its own",
			zap.Strings("triggers", t.names), zap.Bool("value_required", t.value != ""))
	} else if a.DebugTriggerValue != "" {
		a.logger.Warn("debug_trigger_value is set but no debug trigger is on (debug_triggers)")
	}
	a.addWorkers(globals, "")
	if err := registerMetrics(ctx, a.rt); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}

	// On process exit Caddy may stop the http app first, and that waits for the PHP
	// requests in flight: start PHP's bounded shutdown as soon as stopping begins.
	events, err := ctx.App("events")
	if err != nil {
		return fmt.Errorf("loading the events app: %w", err)
	}
	return events.(*caddyevents.App).On("stopping", caddyevents.Handler(exitHook{a}))
}

// setup is what Provision does without other apps: defaults and an empty registry.
func (a *App) setup(ctx caddy.Context) {
	a.ctx = ctx
	a.logger = ctx.Logger()
	a.rt = processRuntime()
	a.exit = new(exitState)
	if a.ShutdownTimeout == 0 {
		a.ShutdownTimeout = caddy.Duration(30 * time.Second)
	}
	if a.MaxIdleTime == 0 {
		a.MaxIdleTime = caddy.Duration(defaultMaxIdleTime)
	}
	if a.TimeoutGrace == 0 {
		a.TimeoutGrace = caddy.Duration(defaultTimeoutGrace)
	}
	if a.MaxStuckThreads == 0 {
		a.MaxStuckThreads = defaultMaxStuckThreads
	}
	if a.SharedStoreSize == 0 {
		a.SharedStoreSize = defaultSharedStoreSize
	}
	if a.LocalStoreSize == 0 {
		a.LocalStoreSize = defaultLocalStoreSize
	}
	if a.ResponseBuffer == 0 {
		a.ResponseBuffer = request.DefaultResponseBuffer
	}
	if a.ResponseBufferTotal == 0 {
		a.ResponseBufferTotal = request.DefaultResponseBufferTotal
	}
	if a.RequestBuffer == 0 {
		a.RequestBuffer = request.DefaultRequestBuffer
	}
	if a.RequestBufferTotal == 0 {
		a.RequestBufferTotal = request.DefaultRequestBufferTotal
	}
	a.registry = &workerRegistry{names: map[string]int{}, globalFiles: map[string]*WorkerConfig{}}
}

// exitState is the stop of PHP for the process's exit.
type exitState struct {
	mu   sync.Mutex
	done chan struct{} // closed once PHP stopped
}

// exitHook starts PHP's shutdown when Caddy stops for good.
type exitHook struct{ app *App }

func (h exitHook) Handle(context.Context, caddy.Event) error {
	if caddy.Exiting() {
		h.app.stopForExit()
	}
	return nil
}

// stopForExit stops PHP once the http app's shutdown_delay has passed, in the
// background: during the delay PHP serves every request as before while readiness
// answers 503, so load balancers move away first. Caddy stops its apps in no set order,
// and the http app's Stop waits for the requests in flight: starting PHP's bounded
// shutdown here (not in whichever Stop comes first) keeps a long request from holding
// the exit for longer than shutdown_timeout, and keeps PHP up for the whole delay.
func (a *App) stopForExit() {
	a.exit.mu.Lock()
	defer a.exit.mu.Unlock()
	if a.exit.done != nil {
		return
	}
	stopping.Store(true)
	done := make(chan struct{})
	a.exit.done = done
	delay := a.shutdownDelay()
	if delay > 0 {
		a.logger.Info("stopping: readiness answers 503 and PHP keeps serving until shutdown_delay has passed",
			zap.Duration("shutdown_delay", delay))
	}
	go func() {
		defer close(done)
		time.Sleep(delay)
		a.rt.Stop(a.runtimePlan())
	}()
}

// shutdownDelay is the http app's shutdown_delay, if any.
func (a *App) shutdownDelay() time.Duration {
	httpApp, err := a.ctx.AppIfConfigured("http")
	if err != nil {
		return 0
	}
	if h, ok := httpApp.(*caddyhttp.App); ok {
		return time.Duration(h.ShutdownDelay)
	}
	return 0
}

// Validate checks the settings.
func (a *App) Validate() error {
	if a.NumThreads < 0 {
		return fmt.Errorf("num_threads must be positive, got %d", a.NumThreads)
	}
	if a.MaxWaitTime < 0 || a.ShutdownTimeout < 0 || a.MaxIdleTime < 0 {
		return fmt.Errorf("max_wait_time, max_idle_time and shutdown_timeout must not be negative")
	}
	if a.MaxStuckThreads < 0 {
		return fmt.Errorf("max_stuck_threads must not be negative, got %d", a.MaxStuckThreads)
	}
	if a.MaxRequests < 0 {
		return fmt.Errorf("max_requests must not be negative, got %d", a.MaxRequests)
	}
	if a.SharedStoreSize < 0 || a.LocalStoreSize < 0 {
		return fmt.Errorf("shared_store_size and local_store_size must not be negative")
	}
	if a.ResponseBuffer < 0 || a.ResponseBufferTotal < 0 {
		return fmt.Errorf("response_buffer and response_buffer_total must not be negative")
	}
	if a.ResponseBuffer > a.ResponseBufferTotal {
		return fmt.Errorf("response_buffer (%d bytes) must not exceed response_buffer_total (%d bytes)", a.ResponseBuffer, a.ResponseBufferTotal)
	}
	if a.RequestBuffer < 0 || a.RequestBufferTotal < 0 {
		return fmt.Errorf("request_buffer and request_buffer_total must not be negative")
	}
	if a.RequestBuffer > a.RequestBufferTotal {
		return fmt.Errorf("request_buffer (%d bytes) must not exceed request_buffer_total (%d bytes)", a.RequestBuffer, a.RequestBufferTotal)
	}
	for _, t := range a.DebugTriggers {
		if t == "" || ((t == triggersOff || t == triggersAuto) && len(a.DebugTriggers) > 1) || strings.ContainsAny(t, " \t;=,") {
			return fmt.Errorf("debug_triggers: %q is not a trigger name (or give auto or off alone)", t)
		}
	}

	if a.Processes < 0 || a.Processes > maxProcesses {
		return fmt.Errorf("processes must be between 1 and %d, got %d", maxProcesses, a.Processes)
	}
	if a.CPUAffinity != "" && a.CPUAffinity != cpuAffinityAuto && a.CPUAffinity != cpuAffinityOff {
		return fmt.Errorf("cpu_affinity must be auto or off, got %q", a.CPUAffinity)
	}
	if a.MaxThreads < 0 && a.MaxThreads != ThreadLimitAuto {
		return fmt.Errorf("max_threads must be a positive number or auto, got %d", a.MaxThreads)
	}
	// What the engine would refuse (a php_ini line PHP cannot read), the core says now:
	// `caddy validate` catches it, and a reload does not stop PHP to find out.
	settings, err := a.engineSettings().JSON()
	if err != nil {
		return err
	}
	return core.CheckSettings(settings)
}

// engineSettings is what an engine for this config starts with.
func (a *App) engineSettings() engineSettings {
	settings := withBundle(a.PHPIni)
	settings.ThreadMaxRequests = a.MaxRequests
	return settings
}

// addWorkers registers workers of this config (the global ones, or a site handler's in
// its Provision) and takes a reference to the pool of each: a worker keeps its pool, so
// its threads, across reloads as long as its name does not change. Names are unique
// per config: a repeated one gets a #2, #3, ... suffix in provisioning order.
func (a *App) addWorkers(workers []*WorkerConfig, server string) {
	a.registry.mu.Lock()
	defer a.registry.mu.Unlock()
	for _, w := range workers {
		if server != "" && a.registry.names[w.Name] > 0 {
			// FrankenPHP's rule: a site worker whose name another worker has is named
			// after its server, then numbered if that is taken too.
			w.Name = server + ":" + w.Name
		}
		key := w.Name
		if a.registry.names[key]++; a.registry.names[key] > 1 {
			key = fmt.Sprintf("%s#%d", key, a.registry.names[key])
		}
		w.pool = a.rt.AcquirePool(key)
		a.registry.all = append(a.registry.all, w)
	}
}

// globalWorkerFiles is a new set of the global workers' files.
func (a *App) globalWorkerFiles() map[string]bool {
	a.registry.mu.Lock()
	defer a.registry.mu.Unlock()
	files := make(map[string]bool, len(a.registry.globalFiles))
	for file := range a.registry.globalFiles {
		files[file] = true
	}
	return files
}

// globalWorker is the global worker whose file is filename, or nil.
func (a *App) globalWorker(filename string) *WorkerConfig {
	return a.registry.globalFiles[filename]
}

// engineSettings is the JSON read by php_worker_engine_new (rust-core/src/config.rs):
// what a running engine keeps until it restarts.
type engineSettings struct {
	PHPIni PHPIni `json:"php_ini,omitempty"`
	// Defaults under php.ini (a portable binary's extension_dir).
	INIDefaults map[string]string `json:"ini_defaults,omitempty"`
	// The app's max_requests: requests per PHP context.
	ThreadMaxRequests int `json:"thread_max_requests,omitempty"`
}

// JSON is the settings as php_worker_engine_new reads them.
func (s engineSettings) JSON() ([]byte, error) {
	return json.Marshal(s)
}

// Equal tells whether an engine started with s runs as one started with o.
func (s engineSettings) Equal(other phpruntime.Settings) bool {
	o, ok := other.(engineSettings)
	return ok && s.PHPIni.Equal(o.PHPIni) && maps.Equal(s.INIDefaults, o.INIDefaults) &&
		s.ThreadMaxRequests == o.ThreadMaxRequests
}

// ChangedKeys lists, sorted, the settings whose values differ between s and o: php_ini
// keys, and max_requests.
func (s engineSettings) ChangedKeys(other phpruntime.Settings) []string {
	o, _ := other.(engineSettings)
	keys := s.PHPIni.ChangedKeys(o.PHPIni)
	if s.ThreadMaxRequests != o.ThreadMaxRequests {
		keys = append(keys, "max_requests")
		sort.Strings(keys)
	}
	return keys
}

// plan is what a config asks of PHP (the runtime's Plan), with the workers it was made
// of and how "auto" chose max_threads.
type plan struct {
	phpruntime.Plan
	workers       []*WorkerConfig
	maxThreadsWhy string
}

// makePlan splits the threads between the classic pool and the workers registered so
// far. Handlers call it after registering theirs, so `caddy validate` catches a
// num_threads that leaves no classic thread.
func (a *App) makePlan() (*plan, error) {
	a.registry.mu.Lock()
	workers := append([]*WorkerConfig(nil), a.registry.all...)
	a.registry.mu.Unlock()
	workerThreads := 0
	for _, w := range workers {
		workerThreads += w.Num
	}
	total := a.NumThreads
	if total == 0 {
		total = max(2*core.CPUs(), workerThreads+1)
	} else if total <= workerThreads {
		return nil, fmt.Errorf("num_threads (%d) must be greater than the worker threads (%d): one thread at least serves classic scripts", total, workerThreads)
	}
	maxThreads, why, err := a.maxThreads(total, workers)
	if err != nil {
		return nil, err
	}
	pools := make([]phpruntime.PoolPlan, len(workers))
	for i, w := range workers {
		pools[i] = phpruntime.PoolPlan{Pool: w.pool, Spec: w.spec()}
	}
	return &plan{
		Plan: phpruntime.Plan{Settings: a.engineSettings(), Processes: a.Processes, PinCPUs: a.CPUAffinity != cpuAffinityOff, Classic: total - workerThreads, Workers: pools,
			Grace: time.Duration(a.ShutdownTimeout), MaxThreads: maxThreads, MaxIdle: time.Duration(a.MaxIdleTime),
			SharedStore: a.SharedStoreSize, LocalStore: a.LocalStoreSize,
			TimeoutGrace: time.Duration(a.TimeoutGrace), MaxStuck: a.MaxStuckThreads},
		workers: workers, maxThreadsWhy: why,
	}, nil
}

// Start gives this config's settings and workers to PHP: it starts PHP, or prepares the
// running PHP to take this config over when the old config stops.
func (a *App) Start() error {
	p, err := a.makePlan()
	if err != nil {
		return err
	}
	a.plan = p
	a.rt.SetLogger(a.logger)
	warnPHPCurrencyOnce(a.logger) // a PHP that is behind or past its end of life (phpcurrency.go)
	if p.maxThreadsWhy != "" {
		a.logger.Info("max_threads auto", zap.Int("max_threads", p.MaxThreads), zap.String("why", p.maxThreadsWhy))
	}
	if err := a.rt.Start(&p.Plan); err != nil {
		return err
	}
	a.watch(p.workers)
	a.startScheduler()
	return nil
}

// watch starts the file watchers of the workers that have them. A watcher that cannot
// start is logged, not fatal: the worker serves without it.
func (a *App) watch(workers []*WorkerConfig) {
	for _, w := range workers {
		if len(w.Watch) == 0 {
			continue
		}
		pool := w.pool
		fw, err := phpruntime.NewWatcher(w.watchRoot, w.Watch, watchDebounce, a.logger.With(zap.String("worker", pool.Key())),
			func(files []string) { a.rt.RestartWatched(pool, files) })
		if err != nil {
			a.logger.Error("cannot watch the worker's files; it serves without restarting on changes",
				zap.String("worker", pool.Key()), zap.Error(err))
			continue
		}
		a.watchers = append(a.watchers, fw)
	}
}

// Stop hands PHP over to the config that replaces this one, or undoes this config's
// Start if its load failed, or stops PHP when no config needs it any more.
func (a *App) Stop() error {
	for _, fw := range a.watchers {
		fw.Close()
	}
	a.watchers = nil
	a.stopScheduler()
	if caddy.Exiting() {
		a.stopForExit() // PHP stops after shutdown_delay; Cleanup waits for it
		return nil
	}
	a.rt.Stop(a.runtimePlan())
	return nil
}

// Cleanup releases the global workers' pools.
func (a *App) Cleanup() error {
	if a.registry == nil {
		return nil
	}
	a.exit.mu.Lock()
	done := a.exit.done
	a.exit.mu.Unlock()
	if done != nil {
		<-done // every app has stopped: the process exits once PHP has
	}
	for _, list := range [][]WorkerConfig{a.Workers, a.Background, a.TaskWorkers} {
		for i := range list {
			list[i].releasePool()
		}
	}
	return nil
}

func (a *App) maxWaitTime() time.Duration {
	return time.Duration(a.MaxWaitTime)
}

// requestBufferPolicy says how request bodies wait for PHP (body.go).
func (a *App) requestBufferPolicy() request.BufferPolicy {
	return request.BufferPolicy{Limit: a.RequestBuffer, Total: a.RequestBufferTotal, Off: a.UnbufferedRequests}
}

// responseBufferPolicy says how responses wait for the client (response.go).
func (a *App) responseBufferPolicy() request.BufferPolicy {
	return request.BufferPolicy{Limit: a.ResponseBuffer, Total: a.ResponseBufferTotal, Off: a.UnbufferedResponses}
}

// runtimePlan is the runtime's part of the plan, nil before Start.
func (a *App) runtimePlan() *phpruntime.Plan {
	if a.plan == nil {
		return nil
	}
	return &a.plan.Plan
}

// Interface guards
var (
	_ caddy.App           = (*App)(nil)
	_ caddy.Provisioner   = (*App)(nil)
	_ caddy.Validator     = (*App)(nil)
	_ caddy.CleanerUpper  = (*App)(nil)
	_ caddyevents.Handler = exitHook{}
)
