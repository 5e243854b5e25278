// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/fileserver"
	"go.uber.org/zap"
)

// defaultIndex is the index file and front controller when the config names none.
const defaultIndex = "index.php"

// engineWait bounds how long a request waits for PHP to start, for a php_ini change to
// restart it, or for its worker's config to start.
const engineWait = 30 * time.Second

// Handler serves a PHP site, like FrankenPHP's php_server: a directory holding the
// index file redirects (308) to its slash form, existing static files are served,
// `*.php` scripts run with PATH_INFO after the split extension, and anything else goes
// to the index file, so a Laravel or Symfony public/ folder needs no rewrite rules.
type Handler struct {
	// The document root. Default: the site root ({http.vars.root}), else the current
	// directory. Placeholders are resolved per request.
	Root string `json:"root,omitempty"`

	// The index file and front controller. Default: index.php. "off" disables both the
	// directory redirect and the fallback to the front controller.
	Index string `json:"index,omitempty"`

	// Extensions after which the path is split into SCRIPT_NAME and PATH_INFO. ASCII,
	// case-insensitive. Default: [".php"].
	SplitPath []string `json:"split_path,omitempty"`

	// Do not serve static files: every request that is not a script goes to the index,
	// or, with index "off" too, to the next handler of the route.
	DisableFileServer bool `json:"disable_file_server,omitempty"`

	// Resolve symlinks in the root once, at provision time (or once per distinct root
	// when it has placeholders). Default: true.
	ResolveRootSymlink *bool `json:"resolve_root_symlink,omitempty"`

	// Extra variables for $_SERVER and getenv(); they override every other variable.
	// Values may hold placeholders, replaced per request (a site's worker also gets these
	// values while it boots, with placeholders left as written).
	Env map[string]string `json:"env,omitempty"`

	// How long a request body may stay idle, no byte arriving, before the request ends
	// with 408: a client that stalls mid-upload holds no goroutine or PHP thread for
	// longer (FrankenPHP's request_body_timeout). Default: 60s; negative turns it off
	// (Caddy's own timeouts, read_body, still apply).
	RequestBodyTimeout caddy.Duration `json:"request_body_timeout,omitempty"`

	// Workers of this site: a request whose resolved script is a worker's file, or
	// whose path matches one of its match patterns, goes to that worker.
	Workers []WorkerConfig `json:"workers,omitempty"`

	app        *App
	logger     *zap.Logger
	resolver   resolver
	fileServer *fileserver.FileServer
	env        [][2]string
	root       string    // resolved root when Root has no placeholders
	roots      *sync.Map // placeholder root -> resolved root, at most maxCachedRoots
	rootsKept  *atomic.Int64
}

// maxCachedRoots bounds the resolved roots kept for a root with placeholders: one per
// Host a client sends, say, which would otherwise grow without bound. Past it, roots are
// resolved for each request.
const maxCachedRoots = 1024

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.php_worker",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets up the handler and takes its workers' pools. Like App.Provision it
// starts no PHP.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := configuredApp(ctx)
	if err != nil {
		return err
	}
	return h.setup(ctx, app)
}

// setup is Provision once the app is known.
func (h *Handler) setup(ctx caddy.Context, app *App) error {
	h.logger = ctx.Logger()
	h.app = app

	if h.Root == "" {
		h.Root = "{http.vars.root}"
	}
	if h.Index == "" {
		h.Index = defaultIndex
	}
	index := h.Index
	if index == "off" {
		index = ""
	} else if strings.ContainsAny(index, `/\`) || index == "." || index == ".." {
		return fmt.Errorf("index must be a file name, got %q", h.Index)
	}
	split := h.SplitPath
	if len(split) == 0 {
		split = []string{".php"}
	}
	normalized, ok := normalizeSplit(split)
	if !ok {
		return fmt.Errorf("split extensions must be ASCII: %q", split)
	}
	if h.ResolveRootSymlink == nil {
		yes := true
		h.ResolveRootSymlink = &yes
	}
	h.resolver = resolver{index: index, split: normalized, fileServer: !h.DisableFileServer, stat: statKind}

	if err := checkEnv(h.Env); err != nil {
		return err
	}
	keys := make([]string, 0, len(h.Env))
	for k := range h.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.env = append(h.env, [2]string{k, h.Env[k]})
	}

	h.roots, h.rootsKept = new(sync.Map), new(atomic.Int64)
	if !strings.Contains(h.Root, "{") {
		root, err := h.absRoot(h.Root)
		if err != nil {
			return fmt.Errorf("root %q: %w", h.Root, err)
		}
		h.root = root
	}

	base := h.root
	if base == "" && slices.ContainsFunc(h.Workers, func(w WorkerConfig) bool { return !filepath.IsAbs(w.FileName) }) {
		h.logger.Warn("php_worker root has placeholders: relative worker files are resolved from the working directory")
	}
	workers := make([]*WorkerConfig, 0, len(h.Workers))
	for i := range h.Workers {
		w := &h.Workers[i]
		if err := w.provision(ctx, base, h.Env); err != nil {
			return err
		}
		workers = append(workers, w)
	}
	if err := checkUniqueFiles("php_worker site directive", workers); err != nil {
		return err
	}
	h.app.addWorkers(workers)
	if _, err := h.app.makePlan(); err != nil {
		return err
	}
	h.resolver.known = func(name string) bool { return h.workerFor(name) != nil }

	if h.resolver.fileServer {
		h.fileServer = &fileserver.FileServer{Root: h.Root}
		if err := h.fileServer.Provision(ctx); err != nil {
			return fmt.Errorf("provisioning the static file server: %w", err)
		}
	}
	return nil
}

// Cleanup releases the pools of the handler's workers.
func (h *Handler) Cleanup() error {
	for i := range h.Workers {
		h.Workers[i].releasePool()
	}
	return nil
}

func (h *Handler) absRoot(root string) (string, error) {
	abs, err := caddy.FastAbs(root)
	if err != nil {
		return "", err
	}
	if *h.ResolveRootSymlink {
		if resolved, err := filepath.EvalSymlinks(abs); err == nil {
			abs = resolved
		}
	}
	return abs, nil
}

// rootFor resolves the document root of a request, caching placeholder results.
func (h *Handler) rootFor(repl *caddy.Replacer) (string, error) {
	if h.root != "" {
		return h.root, nil
	}
	raw := repl.ReplaceAll(h.Root, ".")
	if v, ok := h.roots.Load(raw); ok {
		return v.(string), nil
	}
	abs, err := h.absRoot(raw)
	if err != nil {
		return "", err
	}
	if h.rootsKept.Load() < maxCachedRoots {
		if _, loaded := h.roots.LoadOrStore(raw, abs); !loaded {
			h.rootsKept.Add(1)
		}
	}
	return abs, nil
}

// ServeHTTP resolves the request to a script, a static file or a redirect.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if strings.IndexByte(r.URL.Path, 0) >= 0 {
		return h.refuse(r, http.StatusBadRequest, "invalid request path: NUL byte")
	}
	if cl := r.Header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err != nil || n < 0 {
			return h.refuse(r, http.StatusBadRequest, fmt.Sprintf("invalid Content-Length header %q", cl))
		}
	}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	root, err := h.rootFor(repl)
	if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	if worker := h.matchWorker(r); worker != nil {
		return h.servePHP(w, r, h.workerScript(root, worker), repl, worker)
	}
	kind, s := h.resolver.resolve(root, r.URL.Path)
	if kind == targetPHP && r.URL.RawPath != "" {
		// The escaped path is what some path matchers judged; if it selects another
		// script than the decoded one (e.g. "/a.php%2F..%2Fb.php"), refuse.
		if escaped, err := url.PathUnescape(caddyhttp.NormalizedPath(r.URL.EscapedPath(), true)); err != nil ||
			scriptPart(escaped, h.resolver.split) != scriptPart(caddyhttp.NormalizedPath(r.URL.Path, true), h.resolver.split) {
			return h.refuse(r, http.StatusBadRequest, "escaped and decoded paths select different scripts")
		}
	}
	switch kind {
	case targetRedirect:
		to := r.URL.EscapedPath() + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, to, http.StatusPermanentRedirect)
		return nil
	case targetStatic:
		return h.fileServer.ServeHTTP(w, r, next)
	case targetNotFound:
		if h.Index == "off" && h.DisableFileServer {
			// It serves scripts only (FrankenPHP's php, or php_server with index off
			// and file_server off): what is not one is for the next handler.
			return next.ServeHTTP(w, r)
		}
		return caddyhttp.Error(http.StatusNotFound, nil)
	}
	return h.servePHP(w, r, s, repl, h.workerFor(s.filename))
}

// matchWorker is the site worker whose match patterns take this request, if any.
func (h *Handler) matchWorker(r *http.Request) *WorkerConfig {
	for i := range h.Workers {
		if h.Workers[i].matches(r) {
			return &h.Workers[i]
		}
	}
	return nil
}

// defaultRequestBodyTimeout is RequestBodyTimeout's default, FrankenPHP's.
const defaultRequestBodyTimeout = 60 * time.Second

// bodyIdleTimeout is how long the body may stay idle; 0 for no limit.
func (h *Handler) bodyIdleTimeout() time.Duration {
	switch t := time.Duration(h.RequestBodyTimeout); {
	case t < 0:
		return 0
	case t == 0:
		return defaultRequestBodyTimeout
	default:
		return t
	}
}

// idleBody ends a read of the request body that waits longer than idle for a byte: the
// connection's read deadline moves before each read (a timeout reads as
// os.ErrDeadlineExceeded, answered 408).
type idleBody struct {
	io.ReadCloser
	conn *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	_ = b.conn.SetReadDeadline(time.Now().Add(b.idle))
	return b.ReadCloser.Read(p)
}

// owns says whether w is one of this site's own workers (not a global one).
func (h *Handler) owns(w *WorkerConfig) bool {
	for i := range h.Workers {
		if &h.Workers[i] == w {
			return true
		}
	}
	return false
}

// workerFor is the worker whose file is filename: this site's first, then global ones.
func (h *Handler) workerFor(filename string) *WorkerConfig {
	var matching *WorkerConfig // a worker with match patterns serves its file too, unless one without does
	for i := range h.Workers {
		if w := &h.Workers[i]; w.FileName == filename {
			if len(w.MatchPath) == 0 {
				return w
			}
			if matching == nil {
				matching = w
			}
		}
	}
	if matching != nil {
		return matching
	}
	return h.app.globalWorker(filename)
}

// workerScript is the script of a request routed by match: the worker file, named from
// the root when it lies inside it.
func (h *Handler) workerScript(root string, w *WorkerConfig) script {
	s := script{root: root, filename: w.FileName}
	if rel, err := filepath.Rel(root, w.FileName); err == nil && filepath.IsLocal(rel) {
		s.name = "/" + filepath.ToSlash(rel)
	}
	return s
}

func scriptPart(p string, split []string) string {
	if pos := splitPos(p, split); pos >= 0 {
		return p[:pos]
	}
	return p
}

// refuse answers a bad request with a status and a log line naming the rule.
func (h *Handler) refuse(r *http.Request, status int, reason string) error {
	h.logger.Warn("request refused", zap.Int("status", status), zap.String("reason", reason),
		zap.String("remote_ip", r.RemoteAddr), zap.String("uri", r.RequestURI))
	return caddyhttp.Error(status, errors.New(reason))
}

// servePHP hands the request to a PHP thread (of worker's pool, or the classic pool
// when worker is nil) and waits for its response.
func (h *Handler) servePHP(w http.ResponseWriter, r *http.Request, s script, repl *caddy.Replacer, worker *WorkerConfig) error {
	if idle := h.bodyIdleTimeout(); idle > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = &idleBody{ReadCloser: r.Body, conn: http.NewResponseController(w), idle: idle}
	}
	// The body first, whole when buffering is on (body.go): no PHP thread waits on it.
	// A body PHP would refuse (past post_max_size) is not read ahead: PHP refuses it
	// without reading it, as it always did.
	var body *requestBody
	limit := php.postMaxSize()
	if policy := h.app.requestBufferPolicy(); !policy.off && r.Body != nil && r.Body != http.NoBody &&
		(r.ContentLength < 0 || r.ContentLength > readAheadBody) && (limit <= 0 || r.ContentLength <= limit) {
		var err error
		if body, err = bufferBody(r.Body, policy, limit); err != nil {
			return bodyError(err)
		}
		if r.ContentLength >= 0 && body.size != r.ContentLength {
			body.close()
			return bodyError(io.ErrUnexpectedEOF)
		}
	}
	b := getRequestBuffer()
	if body != nil && body.complete() {
		b.contentLength = body.size
	} else {
		b.contentLength = r.ContentLength
	}
	pool := uint32(C.PHP_WORKER_CLASSIC_POOL)
	var removed *atomic.Bool
	if worker != nil {
		pool, removed = worker.pool.id, &worker.pool.removed
		if h.owns(worker) {
			// The worker's env includes the site's; the core has its pool's part.
			buildRequest(b, r, s, repl, worker.requestEnv)
		} else {
			// A global worker: this site's env comes after, and wins, for its requests.
			buildRequest(b, r, s, repl, worker.requestEnv, h.env)
		}
	} else {
		buildRequest(b, r, s, repl, h.env)
	}
	flags := uint32(0)
	if body != nil && body.complete() && body.size <= readAheadBody {
		// A chunked body that turned out small travels with the request, as one with a
		// small Content-Length does.
		start := len(b.strings)
		b.strings = append(b.strings, make([]byte, body.size)...)
		err := body.copyTo(b.strings[start:])
		body.close()
		body = nil
		if err != nil {
			putRequestBuffer(b)
			return caddyhttp.Error(http.StatusInternalServerError, err)
		}
		b.bodyLen = len(b.strings) - start
		flags |= C.PHP_WORKER_REQUEST_BODY_COMPLETE
	} else if body == nil && r.ContentLength >= 0 && r.ContentLength <= readAheadBody {
		start := len(b.strings)
		b.strings = append(b.strings, make([]byte, r.ContentLength)...)
		n, err := readBody(r.Body, b.strings[start:])
		if err == nil && int64(n) < r.ContentLength {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			putRequestBuffer(b)
			return bodyError(err)
		}
		b.strings = b.strings[:start+n]
		b.bodyLen = n
		flags |= C.PHP_WORKER_REQUEST_BODY_COMPLETE
	}

	pr := acquireRequest(h, w, r)
	if pr == nil {
		putRequestBuffer(b)
		if body != nil {
			body.close()
		}
		return h.unavailable(w, "too many requests in flight", time.Second)
	}
	pr.body = body     // closed with the request
	defer pr.release() // the handler's reference
	core, rc := php.submit(r.Context(), engineWait, pool, removed, b, flags, pr.handle)
	putRequestBuffer(b)
	if rc != C.PHP_WORKER_OK {
		pr.release() // the core never got it
	}
	switch rc {
	case C.PHP_WORKER_OK:
	case C.PHP_WORKER_ERR_QUEUE_FULL:
		return h.unavailable(w, "all PHP threads are busy and the queue is full", time.Second)
	case C.PHP_WORKER_ERR_STOPPED:
		return h.unavailable(w, "PHP is not running", time.Second)
	case C.PHP_WORKER_ERR_UNKNOWN_POOL:
		return h.unavailable(w, "worker "+worker.Name+" was removed by a config change", time.Second)
	default:
		return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("php_worker: submitting the request failed (code %d)", rc))
	}
	pr.mu.Lock()
	pr.core = core
	pr.mu.Unlock()

	var timeout <-chan time.Time
	var retry *time.Timer
	if wait := h.app.maxWaitTime(); wait > 0 {
		retry = time.NewTimer(wait)
		defer retry.Stop()
		timeout = retry.C
	}
	defer pr.closeOutput()
	defer pr.endReads(w)
	for {
		select {
		case <-pr.wake:
			end, err := pr.send()
			if errors.Is(err, errExpired) {
				return h.expired(w, pr)
			}
			if errors.Is(err, errRefused) {
				return h.refused(w, pr, worker)
			}
			if errors.Is(err, errTruncated) {
				return h.truncated(w, pr)
			}
			if err != nil {
				// The PHP thread has moved on, or will at its next output: only this
				// goroutine waited on the client (timeouts write bounds that wait).
				pr.abandon()
				h.logger.Info("client stopped reading the response; it is dropped", zap.String("uri", r.RequestURI),
					zap.Error(err))
				return nil
			}
			if end {
				return nil
			}
		case <-r.Context().Done():
			// A read of the body in progress ends first: its error says whether the body
			// stopped arriving (a 408) or the client left.
			pr.endReads(w)
			if pr.abandon() {
				return caddyhttp.Error(http.StatusRequestTimeout, errors.New("php_worker: the request body stopped arriving"))
			}
			return nil
		case <-timeout:
			timeout = nil
			if e := php.engine.Load(); e != nil && e.poolWaiting(pool) > 0 {
				// A thread of the pool is free: the request is on its way to it, and
				// max_wait_time counts only the time no thread was free.
				retry.Reset(h.app.maxWaitTime())
				timeout = retry.C
				continue
			}
			if pr.withdraw() {
				return h.unavailable(w, "no PHP thread became free within max_wait_time", time.Second)
			}
			// Already running: max_wait_time only bounds the wait for a thread.
		}
	}
}

// bodyError answers a request whose body did not arrive whole (see bodyErrorStatus).
func bodyError(err error) error {
	return caddyhttp.Error(bodyErrorStatus(err), fmt.Errorf("reading the request body: %w", err))
}

// expired answers a request the core gave up on (it ran past its deadline; the core
// logged why): 504 if nothing left yet, else the response is cut off, so the client
// sees it incomplete rather than whole.
func (h *Handler) expired(w http.ResponseWriter, pr *phpRequest) error {
	pr.abandonOrAbort()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusGatewayTimeout)
	_, _ = io.WriteString(w, "504 Gateway Timeout: the PHP script ran past its time limit\n")
	return nil
}

// truncated answers a request part of whose response could not be buffered (respond
// logged why): 500 if nothing left yet, else the response is cut off, never framed as
// complete.
func (h *Handler) truncated(w http.ResponseWriter, pr *phpRequest) error {
	pr.abandonOrAbort()
	return caddyhttp.Error(http.StatusInternalServerError, errTruncated)
}

// refused answers a request the core handed back without serving it, for the reason it
// gave: every such answer is written here.
func (h *Handler) refused(w http.ResponseWriter, pr *phpRequest, worker *WorkerConfig) error {
	pr.mu.Lock()
	why, bodyErr := pr.refusal, pr.bodyErr
	pr.mu.Unlock()
	pool := "the classic PHP threads"
	if worker != nil {
		pool = "worker " + worker.Name
	}
	switch why.code {
	case refusedStopped:
		return h.unavailable(w, pool+" stopped", time.Second)
	case refusedBootFailing:
		return h.unavailable(w, pool+" fails to start; the server log says why", why.retryAfter)
	case refusedBody:
		if bodyErr == nil {
			bodyErr = io.ErrUnexpectedEOF
		}
		// What the script answered was built on part of the body.
		return bodyError(bodyErr)
	}
	h.logger.Error("the PHP core dropped a request without answering it", zap.Uint32("refusal", why.code),
		zap.String("uri", pr.uri))
	return h.unavailable(w, "the request was lost", time.Second)
}

// unavailable answers 503 with a Retry-After header (whole seconds, at least 1) and a
// body saying why.
func (h *Handler) unavailable(w http.ResponseWriter, reason string, retryAfter time.Duration) error {
	h.logger.Warn("request answered 503", zap.String("reason", reason))
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64((retryAfter+time.Second-1)/time.Second)), 10))
	http.Error(w, "503 Service Unavailable: "+reason, http.StatusServiceUnavailable)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
