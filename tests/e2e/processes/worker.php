<?php
// A worker serving /w/sleep (as sleep.php), /w/crash (as crash.php) and /w/spin (as
// spin.php).
require __DIR__ . '/spin.php';
$handler = function () {
    if (str_starts_with($_SERVER['REQUEST_URI'], '/w/spin')) {
        echo spin((float) ($_GET['s'] ?? 1));
        return;
    }
    usleep((int) ($_GET['ms'] ?? 0) * 1000);
    if (str_starts_with($_SERVER['REQUEST_URI'], '/w/crash')) {
        pw_crash($_GET['how'] ?? 'segv');
    }
    echo "pid=" . getmypid();
};
while (frankenphp_handle_request($handler)) {
}
