<?php

namespace App\Console;

use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Foundation\Console\Kernel as ConsoleKernel;

// The console kernel, with the schedule that php_worker's `schedule ... artisan
// schedule:run` runs (tests/e2e/test_laravel_tasks.py).
class Kernel extends ConsoleKernel
{
    protected function schedule(Schedule $schedule)
    {
        $log = getenv('SCHEDULE_LOG');
        if ($log) {
            $schedule->call(static function () use ($log): void {
                file_put_contents($log, json_encode(['ran' => microtime(true), 'app' => config('app.name')]) . "\n", FILE_APPEND);
            })->everyMinute()->name('php_worker-test');
        }
        // A scheduled artisan command, which Laravel runs as a process of its own through
        // PHP_BINARY (tests/install/image.sh: in a root with no other PHP).
        $commandLog = getenv('SCHEDULE_COMMAND_LOG');
        if ($commandLog) {
            $schedule->command('php-worker:tick', [$commandLog])->everyMinute();
        }
    }

    protected function commands()
    {
        \Illuminate\Support\Facades\Artisan::command('php-worker:tick {log}', function (string $log): void {
            file_put_contents($log, json_encode(['binary' => PHP_BINARY, 'sapi' => PHP_SAPI, 'pid' => getmypid()]) . "\n", FILE_APPEND);
        });
    }
}
