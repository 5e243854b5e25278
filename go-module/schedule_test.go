// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"testing"
	"time"
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
