<?php
// `php artisan queue:work redis` as a background worker (docs/background-work.md), the
// way a production app consumes its queue on every instance (tests/e2e/test_instances.py).
// php_worker_on_stop() sets what SIGTERM sets for artisan: the worker ends after its
// current job, so a stop or a deploy never cuts a job in half.
$app = require __DIR__ . '/bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Console\Kernel::class);
$kernel->bootstrap();
php_worker_on_stop(static function () use ($app): void {
    $app->make('queue.worker')->shouldQuit = true;
});
exit($kernel->call('queue:work', ['connection' => 'redis', '--sleep' => 1, '--max-time' => 3600]));
