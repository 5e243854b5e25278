<?php
// A worker routed by its file: `worker app.php` in the site.
$n = 0;
while (frankenphp_handle_request(function () use (&$n) {
    $n++;
    echo 'worker app:', $n, '|', $_SERVER['SCRIPT_NAME'], '|', $_SERVER['REQUEST_URI'];
})) {
}
