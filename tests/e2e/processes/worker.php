<?php
// A worker serving /w/sleep (as sleep.php) and /w/crash (as crash.php).
$handler = function () {
    usleep((int) ($_GET['ms'] ?? 0) * 1000);
    if (str_starts_with($_SERVER['REQUEST_URI'], '/w/crash')) {
        pw_crash($_GET['how'] ?? 'segv');
    }
    echo "pid=" . getmypid();
};
while (frankenphp_handle_request($handler)) {
}
