<?php
// A worker that boots cached code once and runs it on every request.
require __DIR__ . '/lib/shapes.php';
require __DIR__ . '/hang.php';
$served = 0;
while (frankenphp_handle_request(function () use (&$served) {
    $served++;
    if (isset($_GET['busy'])) {
        require __DIR__ . '/public/busy.php';
        return;
    }
    if (isset($_GET['kind'])) {
        echo hang($_GET['kind'], $_GET['target'] ?? '');
        return;
    }
    if (isset($_GET['reset'])) {
        echo opcache_reset() ? 'reset' : 'not reset';
        return;
    }
    echo 'worker ', shapes_checksum();
})) {
}
