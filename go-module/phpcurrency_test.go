// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func day(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// fakePHP replaces the build's stamps and the clock for one test.
func fakePHP(t *testing.T, version, listedNewer, checked string, now time.Time) {
	t.Helper()
	oldEmbedded, oldClock := embeddedPHP, phpClock
	embeddedPHP = func(now time.Time) phpCurrency { return assessPHP(version, listedNewer, checked, now) }
	phpClock = func() time.Time { return now }
	t.Cleanup(func() { embeddedPHP, phpClock = oldEmbedded, oldClock })
}

func TestPHPEOLTable(t *testing.T) {
	for branch, want := range map[string]string{"8.2": "2026-12-31", "8.4": "2028-12-31"} {
		if eol, ok := phpEOL(branch); !ok || eol.Format(time.DateOnly) != want {
			t.Errorf("phpEOL(%s) = %v, %v; want %s", branch, eol, ok, want)
		}
	}
	if _, ok := phpEOL("7.9"); ok {
		t.Error("a branch the table does not have has no end of life")
	}
}

func TestAssessPHP(t *testing.T) {
	behind := assessPHP("8.4.24", "8.4.27,8.4.28", "2026-12-07", day("2026-12-07T12:00:00Z"))
	if behind.Current == nil || *behind.Current || behind.NewestListed != "8.4.28" || behind.EOL != "2028-12-31" || behind.EOLPassed {
		t.Errorf("behind: %+v", behind)
	}
	if !reflect.DeepEqual(behind.ListedNewer, []string{"8.4.27", "8.4.28"}) || len(behind.Warnings) != 1 ||
		!strings.HasPrefix(behind.Warnings[0], "PHP 8.4.24 is embedded, but Debian listed newer releases of PHP 8.4 when this binary was built (2026-12-07): 8.4.27, 8.4.28") {
		t.Errorf("behind: %q", behind.Warnings)
	}
	if got, want := behind.summary(), "[behind: Debian listed 8.4.27, 8.4.28 on 2026-12-07; security support until 2028-12-31]"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	current := assessPHP("8.4.28", "", "2026-12-07", day("2026-12-07T12:00:00Z"))
	if current.Current == nil || !*current.Current || current.NewestListed != "8.4.28" || len(current.Warnings) != 0 {
		t.Errorf("current: %+v", current)
	}
	if got, want := current.summary(), "[the newest release Debian listed on 2026-12-07; security support until 2028-12-31]"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	unchecked := assessPHP("8.4.24", "", "", day("2026-12-07T12:00:00Z"))
	if unchecked.Current != nil || unchecked.NewestListed != "" || len(unchecked.Warnings) != 0 {
		t.Errorf("unchecked: %+v", unchecked)
	}
	if got, want := unchecked.summary(), "[not checked against Debian's releases; security support until 2028-12-31]"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	// The end of life against the clock: the last day is still supported.
	if c := assessPHP("8.2.36", "", "2026-12-07", day("2026-12-31T23:59:59Z")); c.EOLPassed || len(c.Warnings) != 0 {
		t.Errorf("on its last day: %+v", c)
	}
	eol := assessPHP("8.2.32", "8.2.36", "2026-12-07", day("2027-01-01T00:00:00Z"))
	if !eol.EOLPassed || len(eol.Warnings) != 2 || eol.Warnings[1] != "PHP 8.2 reached its end of life on 2026-12-31: it gets no security fixes any more" {
		t.Errorf("past its end of life: %+v", eol)
	}
	if got, want := eol.summary(), "[behind: Debian listed 8.2.36 on 2026-12-07; end of life since 2026-12-31]"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	if c := assessPHP("9.9.1", "", "", day("2026-12-07T12:00:00Z")); c.EOL != "" || c.summary() != "[not checked against Debian's releases]" {
		t.Errorf("an unknown branch: %+v", c)
	}
}

func TestPHPCurrencyStartupWarning(t *testing.T) {
	for _, tc := range []struct {
		name, version, newer string
		now                  time.Time
		want                 []string
	}{
		{"current and supported", "8.4.28", "", day("2026-12-07T12:00:00Z"), nil},
		{"behind", "8.4.24", "8.4.27,8.4.28", day("2026-12-07T12:00:00Z"),
			[]string{"PHP 8.4.24 is embedded, but Debian listed newer releases of PHP 8.4 when this binary was built (2026-12-07): 8.4.27, 8.4.28; it lacks their fixes"}},
		{"8.2, before its end of life", "8.2.36", "", day("2026-12-31T12:00:00Z"), nil},
		{"8.2, after its end of life", "8.2.36", "", day("2027-01-02T12:00:00Z"),
			[]string{"PHP 8.2 reached its end of life on 2026-12-31: it gets no security fixes any more"}},
		{"behind and after its end of life", "8.2.32", "8.2.36", day("2027-01-02T12:00:00Z"), []string{
			"PHP 8.2.32 is embedded, but Debian listed a newer release of PHP 8.2 when this binary was built (2026-12-07): 8.2.36; it lacks its fixes",
			"PHP 8.2 reached its end of life on 2026-12-31: it gets no security fixes any more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakePHP(t, tc.version, tc.newer, "2026-12-07", tc.now)
			phpCurrencyLogged = sync.Once{}
			core, logs := observer.New(zapcore.DebugLevel)
			logger := zap.New(core).Named("php_worker")
			warnPHPCurrencyOnce(logger)
			warnPHPCurrencyOnce(logger) // a reload: nothing more
			var got []string
			for _, e := range logs.All() {
				if e.Level != zapcore.WarnLevel || e.LoggerName != "php_worker" {
					t.Errorf("%s %s: %s", e.LoggerName, e.Level, e.Message)
				}
				if e.ContextMap()["php_version"] != tc.version {
					t.Errorf("php_version field: %v", e.ContextMap())
				}
				got = append(got, e.Message)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("logged %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPHPInfoMetric(t *testing.T) {
	for _, tc := range []struct {
		name, version, newer, checked string
		now                           time.Time
		want                          map[string]string
	}{
		{"behind", "8.4.24", "8.4.27,8.4.28", "2026-12-07", day("2026-12-07T12:00:00Z"),
			map[string]string{"version": "8.4.24", "newest_listed": "8.4.28", "current": "false", "eol": "2028-12-31", "supported": "true"}},
		{"current, past its end of life", "8.2.36", "", "2026-12-07", day("2027-01-02T12:00:00Z"),
			map[string]string{"version": "8.2.36", "newest_listed": "8.2.36", "current": "true", "eol": "2026-12-31", "supported": "false"}},
		{"not checked", "8.4.24", "", "", day("2026-12-07T12:00:00Z"),
			map[string]string{"version": "8.4.24", "newest_listed": "", "current": "unknown", "eol": "2028-12-31", "supported": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakePHP(t, tc.version, tc.newer, tc.checked, tc.now)
			registry := prometheus.NewPedanticRegistry()
			registry.MustRegister(newCollector(php))
			families, err := registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, f := range families {
				if f.GetName() != "php_worker_php_info" {
					continue
				}
				if len(f.GetMetric()) != 1 {
					t.Fatalf("%d series", len(f.GetMetric()))
				}
				m := f.GetMetric()[0]
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if !reflect.DeepEqual(labels, tc.want) || m.GetGauge().GetValue() != 1 {
					t.Errorf("php_worker_php_info%v %v, want %v 1", labels, m.GetGauge().GetValue(), tc.want)
				}
				found = true
			}
			if !found {
				t.Error("no php_worker_php_info")
			}
		})
	}
}

func TestStatusPagePHPData(t *testing.T) {
	fakePHP(t, "8.2.32", "8.2.36", "2026-12-07", day("2027-01-02T12:00:00Z"))
	rec := httptest.NewRecorder()
	if err := (&StatusHandler{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/php-status?data=php", nil), nil); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"version": "8.2.32", "branch": "8.2", "checked": "2026-12-07", "listed_newer": []any{"8.2.36"},
		"newest_listed": "8.2.36", "current": false, "eol": "2026-12-31", "eol_passed": true, "warnings": []any{
			"PHP 8.2.32 is embedded, but Debian listed a newer release of PHP 8.2 when this binary was built (2026-12-07): 8.2.36; it lacks its fixes",
			"PHP 8.2 reached its end of life on 2026-12-31: it gets no security fixes any more"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("?data=php:\n got %v\nwant %v", got, want)
	}

	fakePHP(t, "8.4.24", "", "", day("2026-12-07T12:00:00Z"))
	rec = httptest.NewRecorder()
	if err := (&StatusHandler{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/php-status?data=php", nil), nil); err != nil {
		t.Fatal(err)
	}
	if s := rec.Body.String(); !strings.Contains(s, `"current":null`) || !strings.Contains(s, `"warnings":[]`) {
		t.Errorf("not checked: %s", s)
	}
}
