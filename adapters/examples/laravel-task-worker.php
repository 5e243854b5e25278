<?php
// A task worker for a Laravel app: boots the app once per thread, then runs the tasks
// PhpWorker\Tasks::concurrently() sends (closures, with laravel/serializable-closure).
//
//   {
//       php_worker {
//           task_worker {
//               file /srv/app/task-worker.php
//               name tasks
//               num 4
//           }
//       }
//   }
require __DIR__ . '/vendor/autoload.php';
$app = require __DIR__ . '/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

while (php_worker_handle_task(PhpWorker\Tasks::handle(...))) {
}
