<?php
// A worker with a leak on one route: /leak keeps 1 MB per request in the script's
// memory, /ok keeps nothing, /huge goes past memory_limit.
$kept = [];
while (frankenphp_handle_request(function () use (&$kept) {
    $path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
    header('Content-Type: text/plain');
    if ($path === '/leak') {
        $kept[] = str_repeat(chr(65 + count($kept) % 26), 1 << 20);
        echo 'kept ', count($kept), ' MB';
    } elseif ($path === '/huge') {
        echo strlen(str_repeat('y', 512 << 20));
    } else {
        echo 'ok';
    }
})) {
}
