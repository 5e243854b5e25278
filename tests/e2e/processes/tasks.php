<?php
// A task worker: answers a task with its process id, or crashes the process when the
// task's payload is "crash".
while (php_worker_handle_task(function (string $payload) {
    if ($payload === 'crash') {
        pw_crash('segv');
    }
    return (string) getmypid();
})) {
}
