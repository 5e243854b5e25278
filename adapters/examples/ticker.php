<?php
// Octane::tick() on php_worker: a background worker whose ticks run on time until the
// server asks it to stop.
//
//   { php_worker { background /srv/app/ticker.php } }
require __DIR__ . '/vendor/autoload.php';

(new PhpWorker\Ticker())
    ->tick('heartbeat', static fn () => php_worker_shared_put('heartbeat', time()), seconds: 5, immediate: true)
    ->tick('report', static fn () => error_log('queue depth: ' . php_worker_shared_get('queue:depth', 0)), seconds: 60)
    ->run();
