// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A schedule lease makes one instance of many run each time of a job (a schedule's
// `lease redis://...`): before a run, every instance sharing the Redis server asks for
// the key of that job and that due time (SET NX with an expiry), and the one that gets
// it runs the job; the others count the time as run elsewhere. The key names the due
// time, so an instance that dies while it holds one takes nothing with it: the next time
// has a key of its own. The winner also takes the next number of the job's counter
// (INCR), a fencing token its run sees as PHP_WORKER_SCHEDULE_TOKEN: a resource the
// job writes can refuse a token older than one it already saw.
//
// Instances agree on due times only when their clocks do (NTP): a time is one key
// wherever it is computed. When Redis cannot be reached, no instance can tell whether
// another runs the time, so none does: the time is counted failed and logged.

// leaseKeyPrefix starts every key of the leases.
const leaseKeyPrefix = "php_worker:schedule:"

// leaseTimeout bounds the calls to Redis before a run.
const leaseTimeout = 2 * time.Second

// scheduleLease is one Redis server's leases.
type scheduleLease struct {
	client   *redis.Client
	instance string // what a key holds: who ran the time (host name and pid)
}

// The leases' clients, by URL: one client per Redis server, shared by the jobs and by
// the configs a reload swaps (a client holds its connections).
var (
	leasesMu sync.Mutex
	leases   = map[string]*scheduleLease{}
)

// leaseFor returns the lease of a redis:// or rediss:// URL.
func leaseFor(url string) (*scheduleLease, error) {
	leasesMu.Lock()
	defer leasesMu.Unlock()
	if l := leases[url]; l != nil {
		return l, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", url, err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = leaseTimeout, leaseTimeout, leaseTimeout
	host, _ := os.Hostname()
	l := &scheduleLease{client: redis.NewClient(opts), instance: host + ":" + strconv.Itoa(os.Getpid())}
	leases[url] = l
	return l, nil
}

// take asks for the time `due` of job; hold is how long its key lives, longer than the
// clocks of the instances may differ. When won, it returns the run's fencing token.
func (l *scheduleLease) take(job string, due time.Time, hold time.Duration) (won bool, token int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	defer cancel()
	won, err = l.client.SetNX(ctx, leaseKey(job, due), l.instance, hold).Result()
	if err != nil || !won {
		return false, 0, err
	}
	token, err = l.client.Incr(ctx, leaseKeyPrefix+job+":token").Result()
	return true, token, err
}

// leaseKey is the key of the time due of job: instances that compute the same one share
// that time.
func leaseKey(job string, due time.Time) string {
	return leaseKeyPrefix + job + ":" + strconv.FormatInt(due.Unix(), 10)
}

// leaseHold is how long the key of a time lives: the job's period, doubled, and at
// least a minute, so an instance whose clock lags still finds it.
func leaseHold(due, next time.Time) time.Duration {
	return min(max(2*next.Sub(due), time.Minute), 24*time.Hour)
}
