// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestBackgroundTaskWorkersAndSchedules(t *testing.T) {
	dir := workerFiles(t, "queue.php", "tasks.php", "artisan")
	queue, tasks, artisan := filepath.Join(dir, "queue.php"), filepath.Join(dir, "tasks.php"), filepath.Join(dir, "artisan")
	d := caddyfile.NewTestDispenser(`php_worker {
		shutdown_timeout 4s
		background ` + queue + ` 2
		background {
			file ` + queue + `
			name mailer
			env QUEUE mail
			max_boot_backoff 1s
			watch
		}
		task_worker {
			file ` + tasks + `
			name tasks
			num 3
			max_threads 6
		}
		schedule "*/5 * * * *" ` + artisan + ` schedule:run --verbose
		schedule @hourly ` + artisan + ` {
			name hourly
			env APP_RUNNING_IN_CONSOLE true
			lease redis://:secret@10.0.0.5:6379/2
		}
	}`)
	var app App
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	wantBackground := []WorkerConfig{
		{FileName: queue, Num: 2},
		{FileName: queue, Name: "mailer", Env: map[string]string{"QUEUE": "mail"},
			MaxBootBackoff: caddy.Duration(time.Second), Watch: []string{"**/*.php"}},
	}
	if !reflect.DeepEqual(app.Background, wantBackground) {
		t.Errorf("background = %+v, want %+v", app.Background, wantBackground)
	}
	if want := []WorkerConfig{{FileName: tasks, Name: "tasks", Num: 3, MaxThreads: 6}}; !reflect.DeepEqual(app.TaskWorkers, want) {
		t.Errorf("task workers = %+v, want %+v", app.TaskWorkers, want)
	}
	if len(app.Schedules) != 2 || app.Schedules[0].Cron != "*/5 * * * *" || app.Schedules[0].File != artisan ||
		!reflect.DeepEqual(app.Schedules[0].Args, []string{"schedule:run", "--verbose"}) || app.Schedules[1].Name != "hourly" ||
		app.Schedules[1].Env["APP_RUNNING_IN_CONSOLE"] != "true" || len(app.Schedules[1].Args) != 0 ||
		app.Schedules[1].Lease != "redis://:secret@10.0.0.5:6379/2" || app.Schedules[0].Lease != "" {
		t.Errorf("schedules = %+v", app.Schedules)
	}

	// Provisioned: the kinds, defaults and specs the core gets.
	app.setup(caddy.Context{Context: context.Background()})
	app.ShutdownTimeout = caddy.Duration(4 * time.Second)
	bg := &app.Background[0]
	bg.kind, bg.stopTimeout = kindBackground, 4*time.Second
	if err := bg.provision(caddy.Context{Context: context.Background()}, "", nil); err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(bg.spec(), &spec); err != nil {
		t.Fatal(err)
	}
	if spec["kind"] != "background" || spec["stop_timeout_ms"] != float64(4000) || spec["num"] != float64(2) {
		t.Errorf("background spec = %v", spec)
	}
	for _, pair := range bg.poolEnv {
		if pair[0] == "FRANKENPHP_WORKER" {
			t.Error("a background script must not look like a FrankenPHP worker")
		}
	}
	one := WorkerConfig{FileName: queue, kind: kindBackground}
	if err := one.provision(caddy.Context{Context: context.Background()}, "", nil); err != nil || one.Num != 1 {
		t.Errorf("a background worker runs one copy by default: num %d, %v", one.Num, err)
	}
	if err := app.provisionSchedules(); err != nil {
		t.Fatal(err)
	}
	job := app.Schedules[0]
	if job.worker.Name != "artisan schedule:run --verbose" ||
		!reflect.DeepEqual(job.worker.argv, []string{artisan, "schedule:run", "--verbose"}) {
		t.Errorf("job = %+v", job.worker)
	}
	if job.lease != nil || app.Schedules[1].lease == nil {
		t.Errorf("only the job with a lease URL has a lease: %v, %v", job.lease, app.Schedules[1].lease)
	}
	at := time.Date(2026, 12, 2, 10, 3, 0, 0, time.Local)
	if next := job.schedule.Next(at); !next.Equal(time.Date(2026, 12, 2, 10, 5, 0, 0, time.Local)) {
		t.Errorf("*/5 after 10:03 is %v", next)
	}
}

func TestBackgroundAndScheduleErrors(t *testing.T) {
	dir := workerFiles(t, "a.php")
	a := filepath.Join(dir, "a.php")
	for input, message := range map[string]string{
		"php_worker {\nschedule a.php\n}":                                  "a cron expression",
		"php_worker {\nschedule \"61 * * * *\" " + a + "\n}":               "schedule \"61 * * * *\"",
		"php_worker {\nschedule \"* * * * *\" " + a + " {\nbogus 1\n}\n}":  "unknown schedule subdirective",
		"php_worker {\nschedule \"* * * * *\" " + a + " {\nlease\n}\n}":    "wrong argument count",
		"php_worker {\nbackground " + filepath.Join(dir, "no.php") + "\n}": "does not exist",
		"php_worker {\ntask_worker {\nnum 2\n}\n}":                         "file is required",
	} {
		var app App
		err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if err == nil || !strings.Contains(err.Error(), message) {
			t.Errorf("%q: error %v, want one mentioning %q", input, err, message)
		}
	}
	for _, w := range []WorkerConfig{
		{FileName: a, MaxRequests: 10, kind: kindBackground},
		{FileName: a, MaxThreads: 4, kind: kindBackground},
	} {
		err := w.provision(caddy.Context{Context: context.Background()}, "", nil)
		if err == nil || !strings.Contains(err.Error(), "settings of workers that take requests") {
			t.Errorf("%+v: %v", w, err)
		}
	}
}

func TestScheduleClockSpeedsUp(t *testing.T) {
	t.Setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "60")
	c := newScheduleClock()
	if d := c.until(c.now().Add(time.Minute)); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("a minute on a 60× clock is %v", d)
	}
	t.Setenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED", "")
	if c := newScheduleClock(); c.speed != 1 {
		t.Errorf("default speed %v", c.speed)
	}
}

func TestALeaseKeyOutlivesTheClocksDrift(t *testing.T) {
	due := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for period, want := range map[time.Duration]time.Duration{
		time.Second: time.Minute, 5 * time.Minute: 10 * time.Minute, 24 * time.Hour: 24 * time.Hour, 30 * 24 * time.Hour: 24 * time.Hour,
	} {
		if got := leaseHold(due, due.Add(period)); got != want {
			t.Errorf("a period of %v holds its key %v, want %v", period, got, want)
		}
	}
	if _, err := leaseFor("http://10.0.0.5:6379"); err == nil {
		t.Error("a lease URL that is not redis:// or rediss:// is refused")
	}
}
