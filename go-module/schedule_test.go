// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// testWall is a wall clock a test sets, as NTP or a resumed VM would.
type testWall struct{ t time.Time }

func (w *testWall) now() time.Time { return w.t }

func TestScheduleClockFollowsTheWallClock(t *testing.T) {
	t.Setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "")
	wall := &testWall{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	c := scheduleClockOf(wall.now)
	for _, step := range []time.Duration{time.Hour, -10 * time.Minute, 36 * time.Hour} {
		wall.t = wall.t.Add(step) // a step of the wall clock: no real time passes
		if now := c.now(); !now.Equal(wall.t) {
			t.Errorf("after a step of %v, the clock of jobs reads %v, the wall clock %v", step, now, wall.t)
		}
		due := wall.t.Add(5 * time.Minute)
		if d := c.until(due); d != 5*time.Minute {
			t.Errorf("after a step of %v, a time 5m away on the wall clock is %v away", step, d)
		}
		// The scheduler looks at the clock again soon, whatever it waits for: a timer
		// counts monotonic time, and a step while it runs would make the job late.
		if d := c.wait(due); d != wallRecheck {
			t.Errorf("the scheduler sleeps %v before it reads the clock again, want %v", d, wallRecheck)
		}
		if d := c.wait(wall.t.Add(-time.Minute)); d != 0 {
			t.Errorf("a time past is waited for %v", d)
		}
	}
}

// provisionedJob is the job of a config of one schedule line, provisioned.
func provisionedJob(t *testing.T, sc ScheduleConfig) ScheduleConfig {
	t.Helper()
	app := App{Schedules: []ScheduleConfig{sc}}
	app.setup(caddy.Context{Context: context.Background()})
	if err := app.provisionSchedules(); err != nil {
		t.Fatal(err)
	}
	return app.Schedules[0]
}

func TestEveryTimesAreTheSameOnEveryInstance(t *testing.T) {
	t.Setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "")
	job := filepath.Join(workerFiles(t, "job.php"), "job.php")
	// Three instances of one app, with one lease, whose schedulers started (or were
	// reloaded) at different seconds of the same 5 minutes: each computes its times as
	// runSchedules does, from its own clock.
	var first []string
	for _, started := range []time.Time{
		time.Date(2026, 12, 2, 10, 0, 3, 250e6, time.UTC),
		time.Date(2026, 12, 2, 10, 0, 41, 0, time.UTC),
		time.Date(2026, 12, 2, 10, 4, 59, 999e6, time.UTC),
	} {
		sc := provisionedJob(t, ScheduleConfig{Cron: "@every 5m", File: job, Lease: "redis://127.0.0.1:1/0"})
		wall := &testWall{t: started}
		due := sc.schedule.Next(scheduleClockOf(wall.now).now())
		var keys []string
		for range 3 {
			keys = append(keys, leaseKey(sc.leaseJob, due))
			due = sc.schedule.Next(due)
		}
		if first == nil {
			first = keys
			if want := time.Date(2026, 12, 2, 10, 5, 0, 0, time.UTC).Unix(); !strings.HasSuffix(keys[0], ":"+strconv.FormatInt(want, 10)) {
				t.Errorf("the first time of @every 5m after 10:00:03 is key %s, want 10:05:00 (%d)", keys[0], want)
			}
		} else if !reflect.DeepEqual(keys, first) {
			t.Errorf("an instance started at %v leases %v, one started at 10:00:03 %v", started.Format(time.TimeOnly), keys, first)
		}
	}
	// A time on a boundary is past: the next is a period later. Cron expressions keep
	// their own times.
	sc := provisionedJob(t, ScheduleConfig{Cron: "@every 1h30m", File: job})
	on := time.Unix(20*5400, 0)
	if next := sc.schedule.Next(on); !next.Equal(on.Add(90 * time.Minute)) {
		t.Errorf("@every 1h30m after %v (a multiple of 1h30m) is %v", on, next)
	}
	sc = provisionedJob(t, ScheduleConfig{Cron: "7 * * * *", File: job})
	at := time.Date(2026, 12, 2, 10, 3, 0, 0, time.Local)
	if next := sc.schedule.Next(at); !next.Equal(time.Date(2026, 12, 2, 10, 7, 0, 0, time.Local)) {
		t.Errorf("7 * * * * after 10:03 is %v", next)
	}
}

func TestDefaultLeaseKeysAreTheAppsOwn(t *testing.T) {
	dir := t.TempDir()
	for _, app := range []string{"a", "b", "releases/1", "releases/2"} {
		if err := os.MkdirAll(filepath.Join(dir, app), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, app, "artisan"), []byte("<?php\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const redisURL = "redis://127.0.0.1:1/0"
	key := func(file string, args []string, name string) string {
		sc := provisionedJob(t, ScheduleConfig{Cron: "* * * * *", File: file, Args: args, Name: name, Lease: redisURL})
		if name == "" && sc.worker.Name != strings.Join(append([]string{"artisan"}, args...), " ") {
			t.Errorf("the default name of the logs and metrics is %q", sc.worker.Name)
		}
		return sc.leaseJob
	}
	run := []string{"schedule:run"}
	a, b := filepath.Join(dir, "a", "artisan"), filepath.Join(dir, "b", "artisan")

	// Two apps, each with its schedule:run and the default name, share a database.
	if ka, kb := key(a, run, ""), key(b, run, ""); ka == kb || !strings.HasPrefix(ka, "artisan schedule:run@") {
		t.Errorf("the default keys of two apps are %q and %q: they must differ, and start with the name", ka, kb)
	}
	if key(a, run, "") == key(a, []string{"schedule:run", "--verbose"}, "") {
		t.Error("the args are part of the key")
	}
	// The instances of one app agree: same path, same args, same key.
	if k1, k2 := key(a, run, ""), key(a, run, ""); k1 != k2 {
		t.Errorf("two instances of one app lease %q and %q", k1, k2)
	}
	// A deploy that moves a symlink (current -> releases/N) under instances that reload
	// one after the other: the old and the new release still share the times.
	current := filepath.Join(dir, "current")
	var keys []string
	for _, release := range []string{"releases/1", "releases/2"} {
		_ = os.Remove(current)
		if err := os.Symlink(filepath.Join(dir, release), current); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key(filepath.Join(current, "artisan"), run, ""))
	}
	if keys[0] != keys[1] {
		t.Errorf("the releases before and after a deploy lease %q and %q", keys[0], keys[1])
	}
	// A name set is the key as it is: the same job wherever its script lies.
	if ka, kb := key(a, run, "scheduler"), key(b, run, "scheduler"); ka != "scheduler" || kb != "scheduler" {
		t.Errorf("jobs named scheduler lease %q and %q", ka, kb)
	}
}
