<?php
// The demo's front controller. Run as the worker script (the Caddyfile's `worker`), it
// boots once per thread and serves requests in a loop; run as a classic script, it
// serves the one request.
declare(strict_types=1);

require_once __DIR__ . '/../app.php';

if (getenv('FRANKENPHP_WORKER') === '1' && !defined('DEMO_WORKER_BOOTED')) {
    define('DEMO_WORKER_BOOTED', true);
    $worker = ['booted_at' => microtime(true), 'served' => 0];
    while (frankenphp_handle_request(function () use (&$worker): void {
        $worker['served']++;
        demo_handle($worker);
    })) {
    }
    return;
}
demo_handle(null);
