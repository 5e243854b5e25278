<?php
// Hands ?payload= to the task worker "tasks" and says which process ran the task.
echo "pid=" . getmypid() . " task=" . php_worker_task('tasks', $_GET['payload'] ?? 'hello');
