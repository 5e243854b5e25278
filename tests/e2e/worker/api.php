<?php
// A worker routed by `match /api/*`, kept outside the document root.
$n = 0;
while (frankenphp_handle_request(function () use (&$n) {
    $n++;
    header('Content-Type: text/plain');
    echo 'api worker:', $n, '|', $_SERVER['REQUEST_URI'], '|', $_SERVER['SCRIPT_FILENAME'];
})) {
}
