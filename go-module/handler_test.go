// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestRootForBoundsItsCache: a root with a placeholder resolves per request, and keeps
// at most maxCachedRoots results, however many hosts clients send.
func TestRootForBoundsItsCache(t *testing.T) {
	follow := false
	h := &Handler{Root: "/srv/{http.request.host}", ResolveRootSymlink: &follow}
	h.roots, h.rootsKept = new(sync.Map), new(atomic.Int64)
	for i := 0; i < 3*maxCachedRoots; i++ {
		repl := caddy.NewReplacer()
		host := fmt.Sprintf("host%d.test", i)
		repl.Set("http.request.host", host)
		root, err := h.rootFor(repl)
		if err != nil || root != "/srv/"+host {
			t.Fatalf("rootFor(%s) = %q, %v", host, root, err)
		}
	}
	kept := 0
	h.roots.Range(func(_, _ any) bool { kept++; return true })
	if kept != maxCachedRoots || h.rootsKept.Load() != maxCachedRoots {
		t.Fatalf("%d roots cached (counted %d), want %d", kept, h.rootsKept.Load(), maxCachedRoots)
	}
}

// A placeholder's value comes from the request: it may not cut the root at a NUL, nor
// climb out of the folder the config's literal part names.
func TestRootForRefusesPlaceholdersThatLeaveTheirFolder(t *testing.T) {
	follow := false
	h := &Handler{Root: "/srv/tenants/{http.request.uri.query.tenant}/public", ResolveRootSymlink: &follow,
		rootPrefix: "/srv/tenants/"}
	h.roots, h.rootsKept = new(sync.Map), new(atomic.Int64)
	for tenant, want := range map[string]string{
		"a":         "/srv/tenants/a/public",
		"a/../b":    "/srv/tenants/b/public",
		"..":        "",
		"../../etc": "",
		"a/../..":   "",
		".":         "/srv/tenants/public", // a folder of tenants/ still, named "public"
		"a\x00":     "",
		"\x00":      "",
	} {
		repl := caddy.NewReplacer()
		repl.Set("http.request.uri.query.tenant", tenant)
		root, err := h.rootFor(repl)
		if want == "" {
			if _, refused := err.(errRootRefused); !refused {
				t.Errorf("tenant %q: root %q, %v; want a refusal", tenant, root, err)
			}
			continue
		}
		if err != nil || root != want {
			t.Errorf("tenant %q: root %q, %v; want %q", tenant, root, err, want)
		}
	}
}
