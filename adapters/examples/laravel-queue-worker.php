<?php
// `php artisan queue:work` as a background worker: php_worker runs it on a thread of its
// own, restarts it when it ends or crashes, and on a reload (or the server's stop) asks
// it to finish its job and return, as SIGTERM does under supervisord.
//
//   {
//       php_worker {
//           background {
//               file /srv/app/queue-worker.php
//               name queue
//               num 2
//           }
//       }
//   }
require __DIR__ . '/vendor/autoload.php';
$app = require __DIR__ . '/bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Console\Kernel::class);
$kernel->bootstrap();

// Laravel's worker checks this flag between jobs (what its SIGTERM handler sets).
php_worker_on_stop(static function () use ($app): void {
    $app->make('queue.worker')->shouldQuit = true;
});
exit($kernel->call('queue:work', ['--sleep' => 1, '--tries' => 3, '--max-time' => 3600]));
