// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"
	"fmt"
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
	"github.com/php-worker/php_worker/go-module/internal/request"
	"go.uber.org/zap"
)

// defaultIndex is the index file and front controller when the config names none.
const defaultIndex = "index.php"

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

	// The site's name (FrankenPHP's php_server name): its log lines, and the lines PHP
	// writes while it serves the site's requests, carry it as "server", and a worker of
	// the site whose name another worker has is named "<name>:<worker name>". Default:
	// none.
	Name string `json:"name,omitempty"`

	// Workers of this site: a request whose resolved script is a worker's file, or
	// whose path matches one of its match patterns, goes to that worker.
	Workers []WorkerConfig `json:"workers,omitempty"`

	app        *App
	logger     *zap.Logger
	site       *request.Site
	resolver   request.Resolver
	triggers   *debugTriggers // nil: none (App.DebugTriggers)
	fileServer *fileserver.FileServer
	env        [][2]string
	root       string    // resolved root when Root has no placeholders
	rootPrefix string    // else the literal start of Root, made absolute: roots stay under it
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
	if h.Name != "" {
		h.logger = h.logger.With(zap.String("server", h.Name))
	}
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
	normalized, ok := request.NormalizeSplit(split)
	if !ok {
		return fmt.Errorf("split extensions must be ASCII: %q", split)
	}
	if h.ResolveRootSymlink == nil {
		yes := true
		h.ResolveRootSymlink = &yes
	}

	if err := request.CheckEnv(h.Env); err != nil {
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
	} else if literal := h.Root[:strings.IndexByte(h.Root, '{')]; literal != "" {
		prefix, err := caddy.FastAbs(literal)
		if err != nil {
			return fmt.Errorf("root %q: %w", h.Root, err)
		}
		if strings.HasSuffix(literal, "/") && !strings.HasSuffix(prefix, "/") {
			prefix += "/" // "/srv/{host}": a folder of /srv, never /srv itself
		}
		h.rootPrefix = prefix
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
	h.app.addWorkers(workers, h.Name)
	if _, err := h.app.makePlan(); err != nil {
		return err
	}
	// Worker scripts are known to exist: requests for them need no stat.
	known := h.app.globalWorkerFiles()
	for _, w := range workers {
		known[w.FileName] = true
	}
	h.resolver = request.NewResolver(index, normalized, !h.DisableFileServer, known)
	h.triggers = app.debugTriggers()
	h.site = &request.Site{
		Name:            h.Name,
		Runtime:         app.rt,
		Logger:          h.logger,
		RequestBuffer:   app.requestBufferPolicy(),
		ResponseBuffer:  app.responseBufferPolicy(),
		MaxWaitTime:     time.Duration(app.MaxWaitTime),
		BodyIdleTimeout: h.bodyIdleTimeout(),
	}

	if !h.DisableFileServer {
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
	return h.resolveSymlinks(abs), nil
}

func (h *Handler) resolveSymlinks(abs string) string {
	if *h.ResolveRootSymlink {
		if resolved, err := filepath.EvalSymlinks(abs); err == nil {
			abs = resolved
		}
	}
	return abs
}

// errRootRefused says why a request's placeholders gave a document root it may not have.
type errRootRefused string

func (e errRootRefused) Error() string { return string(e) }

// rootFor resolves the document root of a request, caching placeholder results.
func (h *Handler) rootFor(repl *caddy.Replacer) (string, error) {
	if h.root != "" {
		return h.root, nil
	}
	raw := repl.ReplaceAll(h.Root, ".")
	if v, ok := h.roots.Load(raw); ok {
		return v.(string), nil
	}
	// A placeholder's value comes from the request ({query.tenant}, {host}): a NUL would
	// cut the path where C reads it (the script PHP opens would not be the one checked
	// here), and ".." or a slash could climb out of the folder the config names.
	if strings.IndexByte(raw, 0) >= 0 {
		return "", errRootRefused("the document root holds a NUL byte")
	}
	abs, err := caddy.FastAbs(raw)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(abs, h.rootPrefix) {
		return "", errRootRefused("the document root's placeholders lead out of " + h.rootPrefix)
	}
	abs = h.resolveSymlinks(abs)
	if h.rootsKept.Load() < maxCachedRoots {
		if _, loaded := h.roots.LoadOrStore(raw, abs); !loaded {
			h.rootsKept.Add(1)
		}
	}
	return abs, nil
}

// ServeHTTP decides once where the request goes (a redirect, a static file, the next
// handler, or a script on a pool: its route), then hands it down.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if err := h.checkRequest(r); err != nil {
		return err
	}
	// Before anything reads the body (a debug trigger's form field): a client that
	// stalls it is bound by request_body_timeout from its first byte on.
	h.site.WatchBody(w, r)
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	root, err := h.rootFor(repl)
	if refused, ok := err.(errRootRefused); ok {
		return h.refuse(r, http.StatusBadRequest, string(refused))
	} else if err != nil {
		return caddyhttp.Error(http.StatusInternalServerError, err)
	}
	d, err := h.destination(r, root)
	if err != nil {
		return err
	}
	switch d.target {
	case request.TargetRedirect:
		// No body, as Caddy's redir and FrankenPHP's php_server answer.
		w.Header().Set("Location", request.RedirectLocation(r.URL.Path, r.URL.RawQuery))
		w.WriteHeader(http.StatusPermanentRedirect)
		return nil
	case request.TargetStatic:
		return h.fileServer.ServeHTTP(w, r, next)
	case request.TargetNotFound:
		if h.Index == "off" && h.DisableFileServer {
			// It serves scripts only (FrankenPHP's php, or php_server with index off
			// and file_server off): what is not one is for the next handler.
			return next.ServeHTTP(w, r)
		}
		return caddyhttp.Error(http.StatusNotFound, nil)
	}
	return h.site.Serve(w, r, d.script, repl, d.route)
}

// checkRequest refuses what no script may see: a NUL in the path, a malformed
// Content-Length.
func (h *Handler) checkRequest(r *http.Request) error {
	if strings.IndexByte(r.URL.Path, 0) >= 0 {
		return h.refuse(r, http.StatusBadRequest, "invalid request path: NUL byte")
	}
	if cl := r.Header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err != nil || n < 0 {
			return h.refuse(r, http.StatusBadRequest, fmt.Sprintf("invalid Content-Length header %q", cl))
		}
	}
	return nil
}

// destination is where a request goes: what its path names, and for a script, the
// script and its route.
type destination struct {
	target request.Target
	script request.Script
	route  request.Route
}

// destination decides where r goes: a site worker whose match patterns take it, else
// what its path resolves to under root, run by the worker whose file it is, if any.
func (h *Handler) destination(r *http.Request, root string) (destination, error) {
	if worker := h.matchWorker(r); worker != nil {
		return destination{target: request.TargetPHP, script: h.workerScript(root, worker), route: h.route(r, worker)}, nil
	}
	kind, s := h.resolver.Resolve(root, r.URL.Path)
	if kind != request.TargetPHP {
		return destination{target: kind}, nil
	}
	if r.URL.RawPath != "" {
		// The escaped path is what some path matchers judged; if it selects another
		// script than the decoded one (e.g. "/a.php%2F..%2Fb.php"), refuse.
		if escaped, err := url.PathUnescape(caddyhttp.NormalizedPath(r.URL.EscapedPath(), true)); err != nil ||
			scriptPart(escaped, h.resolver.Split()) != scriptPart(caddyhttp.NormalizedPath(r.URL.Path, true), h.resolver.Split()) {
			return destination{}, h.refuse(r, http.StatusBadRequest, "escaped and decoded paths select different scripts")
		}
	}
	return destination{target: kind, script: s, route: h.route(r, h.workerFor(s.Filename))}, nil
}

// route is where a request for worker (nil: a classic script) goes, with the env lists
// its variables end with.
func (h *Handler) route(r *http.Request, worker *WorkerConfig) request.Route {
	switch {
	case worker == nil:
		return request.Route{SiteEnv: h.env}
	case h.triggers != nil && worker.kind == kindHTTP && h.triggers.carriedBy(r):
		// For a debugger or profiler (debug.go): the worker script on a classic thread,
		// for this request alone, with the env its worker gives every request.
		route := request.Route{OneShot: true, Name: worker.Name, WorkerEnv: worker.oneShotEnv}
		if !h.owns(worker) {
			route.SiteEnv = h.env
		}
		return route
	case h.owns(worker):
		// The worker's env includes the site's; the core has its pool's part.
		return request.Route{Pool: worker.pool, Name: worker.Name, WorkerEnv: worker.requestEnv}
	default:
		// A global worker: this site's env comes after, and wins, for its requests.
		return request.Route{Pool: worker.pool, Name: worker.Name, WorkerEnv: worker.requestEnv, SiteEnv: h.env}
	}
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

// bodyIdleTimeout is how long the body may stay idle; 0 for no limit.
func (h *Handler) bodyIdleTimeout() time.Duration {
	switch t := time.Duration(h.RequestBodyTimeout); {
	case t < 0:
		return 0
	case t == 0:
		return request.DefaultRequestBodyTimeout
	default:
		return t
	}
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
func (h *Handler) workerScript(root string, w *WorkerConfig) request.Script {
	s := request.Script{Root: root, Filename: w.FileName}
	if rel, err := filepath.Rel(root, w.FileName); err == nil && filepath.IsLocal(rel) {
		s.Name = "/" + filepath.ToSlash(rel)
	}
	return s
}

func scriptPart(p string, split []string) string {
	if pos := request.SplitPos(p, split); pos >= 0 {
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

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
