// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(PHPHandler{})
}

// PHPHandler is FrankenPHP's handler under its JSON name, http.handlers.php (what its
// php and php_server directives adapt to, and what `frankenphp adapt` writes), with
// FrankenPHP's JSON fields: a JSON config written for FrankenPHP runs unchanged. It
// serves scripts only, as the php directive does: a request for anything else goes to
// the next handler (php_server's routes put a rewrite and a file server around it).
//
// The fields are FrankenPHP 1.12's and 1.13's: root, split_path, resolve_root_symlink,
// env, workers (file_name, num, name, max_threads, env, watch, match_path,
// max_consecutive_failures), request_body_timeout (omitted: 60s; 0 turns it off),
// name, and route_group (1.12) or server_index (1.13), which FrankenPHP's php_server
// sets on the handlers it embeds in several routes: handlers of one group with the same
// fields are one handler, whose workers start once.
type PHPHandler struct {
	Handler

	group  string   // route_group or server_index: "" when neither is set
	raw    []byte   // the JSON, to tell a copy of the group's first handler
	shared *Handler // the group's first handler, which this copy serves through
}

// frankenPHPHandlerJSON is http.handlers.php's JSON as FrankenPHP writes it.
type frankenPHPHandlerJSON struct {
	Root               string            `json:"root,omitempty"`
	SplitPath          []string          `json:"split_path,omitempty"`
	ResolveRootSymlink *bool             `json:"resolve_root_symlink,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	Workers            []WorkerConfig    `json:"workers,omitempty"`
	RouteGroup         string            `json:"route_group,omitempty"`
	ServerIndex        *int              `json:"server_index,omitempty"`
	RequestBodyTimeout *caddy.Duration   `json:"request_body_timeout,omitempty"`
	Name               string            `json:"name,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (PHPHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.php",
		New: func() caddy.Module { return new(PHPHandler) },
	}
}

// UnmarshalJSON reads FrankenPHP's fields; any other field is refused, as Caddy refuses
// unknown fields of every module.
func (h *PHPHandler) UnmarshalJSON(b []byte) error {
	var f frankenPHPHandlerJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("http.handlers.php (FrankenPHP's php handler): %w", err)
	}
	h.Handler = Handler{
		Root:               f.Root,
		Index:              "off",
		SplitPath:          f.SplitPath,
		DisableFileServer:  true,
		ResolveRootSymlink: f.ResolveRootSymlink,
		Env:                f.Env,
		Workers:            f.Workers,
		Name:               f.Name,
	}
	switch {
	case f.RequestBodyTimeout == nil:
	case *f.RequestBodyTimeout == 0:
		h.RequestBodyTimeout = -1 // FrankenPHP's 0 turns it off, as php_worker's negative does
	default:
		h.RequestBodyTimeout = *f.RequestBodyTimeout
	}
	switch {
	case f.RouteGroup != "":
		h.group = "route_group " + f.RouteGroup
	case f.ServerIndex != nil:
		h.group = "server_index " + strconv.Itoa(*f.ServerIndex)
	}
	h.raw = append([]byte(nil), b...)
	return nil
}

// Provision sets the handler up, or, for a copy of its group's first handler, serves
// through that one: FrankenPHP's php_server puts the same handler in several routes,
// and its workers must start once.
func (h *PHPHandler) Provision(ctx caddy.Context) error {
	app, err := configuredApp(ctx)
	if err != nil {
		return err
	}
	if h.group != "" {
		if first := app.frankenPHPGroup(h.group, h.raw, &h.Handler); first != &h.Handler {
			h.shared = first
			return nil
		}
	}
	return h.setup(ctx, app)
}

// ServeHTTP serves the request, through the group's first handler for a copy.
func (h *PHPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.shared != nil {
		return h.shared.ServeHTTP(w, r, next)
	}
	return h.Handler.ServeHTTP(w, r, next)
}

// Cleanup releases the workers' pools; a copy holds none.
func (h *PHPHandler) Cleanup() error {
	if h.shared != nil {
		return nil
	}
	return h.Handler.Cleanup()
}

// frankenPHPGroup is the first handler of a FrankenPHP handler group in this config
// with exactly this JSON; h becomes it when there is none. Handlers of one group with
// other fields are not copies: each is its own.
func (a *App) frankenPHPGroup(group string, raw []byte, h *Handler) *Handler {
	a.registry.mu.Lock()
	defer a.registry.mu.Unlock()
	if a.registry.groups == nil {
		a.registry.groups = map[string]frankenPHPGroup{}
	}
	if g, ok := a.registry.groups[group]; ok && bytes.Equal(g.raw, raw) {
		return g.first
	}
	if _, ok := a.registry.groups[group]; !ok {
		a.registry.groups[group] = frankenPHPGroup{raw: raw, first: h}
	}
	return h
}

// frankenPHPGroup is the first handler of a group and its JSON.
type frankenPHPGroup struct {
	raw   []byte
	first *Handler
}

// Interface guards
var (
	_ caddy.Provisioner           = (*PHPHandler)(nil)
	_ caddy.CleanerUpper          = (*PHPHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*PHPHandler)(nil)
	_ json.Unmarshaler            = (*PHPHandler)(nil)
)
