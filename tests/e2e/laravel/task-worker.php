<?php
// The Laravel app's task worker: boots the app once per thread, then runs the closures
// PhpWorker\Tasks::concurrently() sends (routes/web.php, /concurrently).
$app = require __DIR__ . '/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();
$app->instance('boot_id', 'task-' . bin2hex(random_bytes(6)));

while (php_worker_handle_task(PhpWorker\Tasks::handle(...))) {
}
