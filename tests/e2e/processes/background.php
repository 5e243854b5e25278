<?php
// A background worker: appends its process id to the file $_SERVER['MARKER'] names,
// then crashes its process if CRASH_AFTER_MS is set, else waits to be stopped.
file_put_contents($_SERVER['MARKER'], getmypid() . "\n", FILE_APPEND);
if (($_SERVER['CRASH_AFTER_MS'] ?? '') !== '') {
    usleep((int) $_SERVER['CRASH_AFTER_MS'] * 1000);
    pw_crash('segv');
}
while (!php_worker_wait_stop(5)) {
}
