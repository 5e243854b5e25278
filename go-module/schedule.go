// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// ScheduleConfig is a scheduled job: a PHP script run at the times of a cron expression,
// with a command line, on a PHP thread of its own (`schedule "* * * * *" artisan
// schedule:run` replaces the crontab line of a Laravel app). A run sees `$argv` and
// `$_SERVER['argv']` as the CLI gives them (the script's path, then the args), runs with
// no time limit, and its output goes to the log under the job's name; `php://stdout`
// is the server's standard output. A job is never run twice at once: a time that comes
// while the previous run goes on is skipped, with a log line. Each run's exit status
// and duration are logged and counted (php_worker_schedule_runs_total,
// php_worker_schedule_run_seconds). Runs use the server's PHP as it is when they start;
// a reload does not stop a run, and the server's stop stops it as it stops any script.
type ScheduleConfig struct {
	// The cron expression: five fields (minute, hour, day of month, month, day of
	// week), in the server's time zone, or a descriptor: @hourly, @daily, @every 5m, ...
	Cron string `json:"cron"`

	// The script, relative to Caddy's working directory unless absolute.
	File string `json:"file"`

	// The command line after the script.
	Args []string `json:"args,omitempty"`

	// For logs and metrics. Default: the script's file name and the args. With a lease,
	// a name set here is the job's part of its keys as it is, so it must be unique in
	// the Redis database; a default one is followed by a hash of the script's absolute
	// path and the args (see defaultLeaseJob).
	Name string `json:"name,omitempty"`

	// Extra $_SERVER and getenv() values of its runs. Each run also sees
	// PHP_WORKER_SCHEDULE_DUE, the time it was due (Unix seconds).
	Env map[string]string `json:"env,omitempty"`

	// A Redis server (redis://[:password@]host:port[/db], or rediss:// for TLS) that
	// the instances running this job share: each due time then runs on one instance of
	// them, the first to take its lease, which sees PHP_WORKER_SCHEDULE_TOKEN, a number
	// that grows with each run (a fencing token). Without it, every instance runs every
	// time. When Redis cannot be reached, no instance runs the time (it counts as
	// failed). See docs/background-work.md.
	Lease string `json:"lease,omitempty"`

	schedule cron.Schedule
	worker   WorkerConfig // what a run of the script is, to the core
	lease    *scheduleLease
	leaseJob string // the job's part of its lease keys
}

// parseSchedule reads `schedule <cron> <script> [<args>...]`, with an optional block
// of name and env lines.
func parseSchedule(d *caddyfile.Dispenser) (ScheduleConfig, error) {
	var sc ScheduleConfig
	args := d.RemainingArgs()
	if len(args) < 2 {
		return sc, d.Errf("schedule takes a cron expression (quoted: \"*/5 * * * *\") and a script, then its args")
	}
	sc.Cron, sc.File, sc.Args = args[0], args[1], args[2:]
	if _, err := cron.ParseStandard(sc.Cron); err != nil {
		return sc, d.Errf("schedule %q: %v", sc.Cron, err)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "name":
			if !d.AllArgs(&sc.Name) {
				return sc, d.ArgErr()
			}
		case "env":
			if err := parseEnv(d, &sc.Env); err != nil {
				return sc, err
			}
		case "lease":
			if !d.AllArgs(&sc.Lease) {
				return sc, d.ArgErr()
			}
		default:
			return sc, d.Errf("unknown schedule subdirective %q (known: name, env, lease)", name)
		}
	}
	return sc, nil
}

// provisionSchedules checks the jobs and names them; names are unique in a config.
func (a *App) provisionSchedules() error {
	seen := map[string]int{}
	for i := range a.Schedules {
		sc := &a.Schedules[i]
		s, err := cron.ParseStandard(sc.Cron)
		if err != nil {
			return fmt.Errorf("schedule %q: %w", sc.Cron, err)
		}
		if every, ok := s.(cron.ConstantDelaySchedule); ok {
			s = epochSchedule{period: int64(every.Delay / time.Second)}
		}
		sc.schedule = s
		for _, arg := range sc.Args {
			if strings.ContainsRune(arg, 0) {
				return fmt.Errorf("schedule %s: an arg holds a NUL byte", sc.File)
			}
		}
		name := sc.Name
		if name == "" {
			name = strings.Join(append([]string{filepath.Base(sc.File)}, sc.Args...), " ")
		}
		if seen[name]++; seen[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, seen[name])
		}
		sc.worker = WorkerConfig{FileName: sc.File, Name: name, Num: 1, Env: sc.Env, kind: kindBackground}
		if err := sc.worker.provision(a.ctx, "", nil); err != nil {
			return fmt.Errorf("schedule %s: %w", name, err)
		}
		sc.worker.argv = append([]string{sc.worker.FileName}, sc.Args...)
		if sc.Lease != "" {
			if sc.lease, err = leaseFor(sc.Lease); err != nil {
				return fmt.Errorf("schedule %s: %w", name, err)
			}
			sc.leaseJob = name
			if sc.Name == "" {
				if sc.leaseJob, err = defaultLeaseJob(name, sc.File, sc.Args); err != nil {
					return fmt.Errorf("schedule %s: %w", name, err)
				}
			}
		}
	}
	return nil
}

// defaultLeaseJob is the part of its lease keys of a job with no name of its own: its
// default name, which other apps' jobs may have too (every Laravel app's is `artisan
// schedule:run`), then a hash of the script's absolute path, as configured, and the
// args. The instances of one app, deployed alike, agree on it; apps in other folders
// sharing the Redis database do not. The path is not resolved: a deploy that moves a
// symlink (current -> releases/N) keeps the key, so the instances that reloaded and
// those that did not yet still share the times.
func defaultLeaseJob(name, file string, args []string) (string, error) {
	abs, err := caddy.FastAbs(file)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(strings.Join(append([]string{abs}, args...), "\x00")))
	return name + "@" + hex.EncodeToString(sum[:4]), nil
}

// epochSchedule is the schedule of `@every <period>`: the times that are whole multiples
// of the period since the Unix epoch. robfig/cron counts the period from the time it is
// asked about, the moment each scheduler starts, so instances (and a config after a
// reload) would each have times of their own: a lease, whose key names the time, would
// then run every instance's, and reloads more frequent than the period would never let
// the job run.
type epochSchedule struct {
	period int64 // seconds, at least 1 (robfig/cron rounds @every to whole seconds)
}

// Next is the first multiple of the period after t.
func (e epochSchedule) Next(t time.Time) time.Time {
	return time.Unix((t.Unix()/e.period+1)*e.period, 0).In(t.Location())
}

// scheduleClock is the time jobs are scheduled by: the wall clock, read anew each time,
// so that the jobs follow its corrections (an NTP step, a VM that was paused) rather
// than the monotonic time since the scheduler started. PHP_WORKER_SCHEDULE_CLOCK_SPEED
// (a test hook) makes it run that many times faster than the real one, from the moment
// the scheduler starts, so a test sees minutes of schedule in seconds.
type scheduleClock struct {
	wall  func() time.Time // the wall clock: time.Now, but a test's own
	start time.Time
	speed float64
}

func newScheduleClock() scheduleClock {
	return scheduleClockOf(time.Now)
}

// scheduleClockOf is the clock of jobs that reads the wall clock wall.
func scheduleClockOf(wall func() time.Time) scheduleClock {
	speed := 1.0
	if v, err := strconv.ParseFloat(os.Getenv("PHP_WORKER_SCHEDULE_CLOCK_SPEED"), 64); err == nil && v > 0 {
		speed = v
	}
	return scheduleClock{wall: wall, start: wall(), speed: speed}
}

func (c scheduleClock) now() time.Time {
	if c.speed == 1 {
		return c.wall().Round(0) // the wall reading alone: comparisons with it use the wall clock
	}
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.speed))
}

// until is the real time until the clock reads t.
func (c scheduleClock) until(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.now())) / c.speed)
}

// wallRecheck is the longest the scheduler sleeps before it reads the clock again: a
// timer counts monotonic time, so a sleep until a time an hour away would end late by
// as much as the wall clock was stepped forward, or the VM paused, meanwhile. Waking
// each second, a job starts within a second of its time on the corrected clock, in the
// minute it was due (what Laravel's schedule:run looks at).
const wallRecheck = time.Second

// wait is how long the scheduler sleeps before it looks again whether t has come.
func (c scheduleClock) wait(t time.Time) time.Duration {
	return min(max(0, c.until(t)), wallRecheck)
}

// scheduler runs a config's jobs, from its Start to its Stop.
type scheduler struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// jobsRunning holds the names of the jobs running now, whichever config started them:
// a reload must not start a second run of a job the old config's scheduler started.
var jobsRunning sync.Map

func (a *App) startScheduler() {
	if len(a.Schedules) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &scheduler{cancel: cancel, done: make(chan struct{})}
	a.scheduler = s
	go func() {
		defer close(s.done)
		a.runSchedules(ctx, newScheduleClock())
	}()
}

func (a *App) stopScheduler() {
	if a.scheduler != nil {
		a.scheduler.cancel()
		<-a.scheduler.done
		a.scheduler = nil
	}
}

// runSchedules waits for each job's next time and starts it then, until ctx ends.
func (a *App) runSchedules(ctx context.Context, clock scheduleClock) {
	next := make([]time.Time, len(a.Schedules))
	for i := range a.Schedules {
		next[i] = a.Schedules[i].schedule.Next(clock.now())
	}
	for {
		soonest := 0
		for i := range next {
			if next[i].Before(next[soonest]) {
				soonest = i
			}
		}
		timer := time.NewTimer(clock.wait(next[soonest]))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		now := clock.now()
		for i := range a.Schedules {
			if !next[i].After(now) {
				after := a.Schedules[i].schedule.Next(now)
				a.Schedules[i].start(a.rt, a.logger, next[i], after)
				next[i] = after
			}
		}
	}
}

// start runs the job's time due in the background unless its previous run goes on,
// or, with a lease, another instance takes the time; next is the job's time after it.
func (sc *ScheduleConfig) start(rt *phpruntime.Runtime, logger *zap.Logger, due, next time.Time) {
	name := sc.worker.Name
	if _, running := jobsRunning.LoadOrStore(name, true); running {
		logger.Warn("scheduled job skipped: its previous run has not ended", zap.String("job", name),
			zap.Time("due", due))
		jobStats.record(name, "skipped", 0)
		return
	}
	go func() {
		defer jobsRunning.Delete(name)
		env := [][2]string{{"PHP_WORKER_SCHEDULE_DUE", strconv.FormatInt(due.Unix(), 10)}}
		if sc.lease != nil {
			won, token, err := sc.lease.take(sc.leaseJob, due, leaseHold(due, next))
			if err != nil {
				logger.Error("scheduled job not run: its lease could not be taken, so no instance can tell "+
					"whether another runs it", zap.String("job", name), zap.Time("due", due), zap.Error(err))
				jobStats.record(name, "failed", 0)
				return
			}
			if !won {
				logger.Debug("scheduled job runs on another instance", zap.String("job", name), zap.Time("due", due))
				jobStats.record(name, "elsewhere", 0)
				return
			}
			env = append(env, [2]string{"PHP_WORKER_SCHEDULE_TOKEN", strconv.FormatInt(token, 10)})
		}
		sc.run(rt, logger, env)
	}()
}

// run runs the job once, with env added to its own, and logs how it ended.
func (sc *ScheduleConfig) run(rt *phpruntime.Runtime, logger *zap.Logger, env [][2]string) {
	name := sc.worker.Name
	logger.Debug("scheduled job started", zap.String("job", name), zap.Strings("argv", sc.worker.argv))
	e := rt.Engine()
	if e == nil || e.Stopping() {
		logger.Warn("scheduled job not run: PHP is not running", zap.String("job", name))
		jobStats.record(name, "failed", 0)
		return
	}
	started := time.Now()
	w := sc.worker
	w.poolEnv = append(append([][2]string(nil), sc.worker.poolEnv...), env...)
	outcome, err := e.RunJob(w.spec())
	duration := time.Since(started)
	if err != nil {
		logger.Error("scheduled job could not run", zap.String("job", name), zap.Error(err))
		jobStats.record(name, "failed", duration)
		return
	}
	fields := []zap.Field{zap.String("job", name), zap.Int("exit_status", outcome.ExitStatus),
		zap.Float64("duration_ms", float64(outcome.Duration.Milliseconds()))}
	if outcome.ExitStatus != 0 || outcome.Fatal || outcome.FailedToRun {
		logger.Warn("scheduled job failed", fields...)
		jobStats.record(name, "failed", outcome.Duration)
		return
	}
	logger.Info("scheduled job ended", fields...)
	jobStats.record(name, "ok", outcome.Duration)
}

// jobStats counts the runs of each job, for the metrics.
var jobStats = &jobCounters{jobs: map[string]*jobCount{}}

type jobCounters struct {
	mu   sync.Mutex
	jobs map[string]*jobCount
}

type jobCount struct {
	ok, failed, skipped, elsewhere uint64
	seconds                        core.Histogram
}

// jobBounds are the bounds of the run-duration core.Histogram, in seconds.
var jobBounds = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}

func (j *jobCounters) record(name, result string, d time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.jobs[name]
	if c == nil {
		c = &jobCount{seconds: core.Histogram{Buckets: make([]uint64, len(jobBounds))}}
		j.jobs[name] = c
	}
	switch result {
	case "ok":
		c.ok++
	case "failed":
		c.failed++
	case "elsewhere":
		c.elsewhere++
		return
	default:
		c.skipped++
		return
	}
	s := d.Seconds()
	for i, bound := range jobBounds {
		if s <= bound {
			c.seconds.Buckets[i]++
		}
	}
	c.seconds.Count++
	c.seconds.Sum += s
}

// each calls f with a copy of each job's counts, by name.
func (j *jobCounters) each(f func(name string, c jobCount)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for name, c := range j.jobs {
		copied := *c
		copied.seconds.Buckets = append([]uint64(nil), c.seconds.Buckets...)
		f(name, copied)
	}
}
