// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// Native fuzz targets. `go test` runs each one on its seeds (and on any corpus kept in
// testdata/fuzz/<Name>/); tests/fuzz.sh fuzzes each for a bounded time:
//
//	go test -run '^$' -fuzz '^FuzzResolve$' -fuzztime 30s .

import (
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/php-worker/php_worker/go-module/internal/request"
)

// FuzzCaddyfile feeds arbitrary Caddyfile text to the global option and the site
// directive. Invariants: no panic; an accepted config parses the same way twice, has
// ASCII split extensions and worker files without NUL.
func FuzzCaddyfile(f *testing.F) {
	for _, s := range []string{
		"php_worker {\n num_threads 3\n max_threads auto\n max_idle_time 10s\n shared_store_size 4MB\n local_store_size 512KiB\n" +
			" max_wait_time 2s\n php_ini memory_limit 256M\n php_ini {\n  display_errors 0\n  error_reporting \"E_ALL & ~E_DEPRECATED\"\n }\n}",
		"php_worker {\nnum_threads 0\n}", "php_worker {\nnum_threads x\n}", "php_worker {\nnum_threads\n}",
		"php_worker {\nmax_wait_time soon\n}", "php_worker {\nshutdown_timeout -1s\n}", "php_worker {\nphp_ini a\n}",
		"php_worker {\nmax_threads 0\n}", "php_worker {\nmax_idle_time 0s\n}", "php_worker {\nshared_store_size 1\n}",
		"php_worker {\nnonsense 1\n}", "php_worker extra",
		"php_worker {\n root public\n index app.php\n split .php .phtml\n file_server off\n env APP_ENV production\n env DEBUG 0\n}",
		"php_worker", "php_worker {\nfile_server on\n}", "php_worker {\nenv ONLY_KEY\n}", "php_worker {\nsplit\n}",
		"php_worker {\nsplit .p\u0125p\n}", "php_worker {\nwat\n}", "php_worker {\nroot a b\n}",
		"php_worker {\n worker fuzz_test.go 3\n worker {\n  file fuzz_test.go\n  num 2\n  max_requests 500\n  name api\n" +
			"  env APP_ENV prod\n  max_boot_backoff 2s\n  max_threads 6\n  watch\n }\n" +
			" worker {\n  file fuzz_test.go\n  watch src/**/*.php /etc/app/*.ini\n }\n}",
		"php_worker {\n root .\n worker fuzz_test.go\n worker {\n  file fuzz_test.go\n  match /api/* /graphql\n }\n}",
		"php_worker {\nworker {\nfile a.php\nmatch /x\n}\n}", "php_worker {\nworker a.php zero\n}", "php_worker {\nworker {\nnum 2\n}\n}",
		"php_worker {\nworker a.php 1 2\n}", "php_worker {\nworker missing.php\n}", "php_worker {\nworker {\nfile a.php\nbogus 1\n}\n}",
		"php_worker {\nphp_ini <<EOF\n x\n EOF\n}", "php_worker {\nenv K `a b`\n}", "php_worker {\n{\n}\n}",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, input string, site bool) {
		// Worker files are opened while adapting: keep the fuzzer away from device files
		// and FIFOs, whose open can block forever.
		for _, special := range []string{"/dev", "/proc", "/sys", "/run", "/tmp"} {
			if strings.Contains(input, special) {
				return
			}
		}
		// NewTestDispenser exits the process on a lexer error (log.Fatalf); lex here.
		tokens, err := caddyfile.Tokenize([]byte(input), "Caddyfile")
		if err != nil {
			return
		}
		if site {
			var h, h2 Handler
			if err := h.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)); err != nil {
				return
			}
			_ = h2.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens))
			if !reflect.DeepEqual(h, h2) {
				t.Fatalf("%q parses to %+v, then %+v", input, h, h2)
			}
			if _, ok := request.NormalizeSplit(h.SplitPath); !ok {
				t.Fatalf("%q: non-ASCII split extensions accepted: %q", input, h.SplitPath)
			}
			checkWorkers(t, input, h.Workers)
			return
		}
		var a, a2 App
		if err := a.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)); err != nil {
			return
		}
		_ = a2.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens))
		if !reflect.DeepEqual(a, a2) {
			t.Fatalf("%q parses to %+v, then %+v", input, a, a2)
		}
		if a.NumThreads < 0 || a.MaxIdleTime < 0 || a.MaxWaitTime < 0 || a.ShutdownTimeout < 0 ||
			a.SharedStoreSize < 0 || a.LocalStoreSize < 0 {
			t.Fatalf("%q: a negative setting was accepted: %+v", input, a)
		}
		checkWorkers(t, input, a.Workers)
	})
}

func checkWorkers(t *testing.T, input string, workers []WorkerConfig) {
	for _, w := range workers {
		if w.FileName == "" || strings.ContainsRune(w.FileName, 0) || w.Num < 0 || w.MaxRequests < 0 || w.MaxThreads < 0 {
			t.Fatalf("%q: invalid worker accepted: %+v", input, w)
		}
	}
}
