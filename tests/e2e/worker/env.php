<?php
// What the worker saw while it booted, and what each request sees.
$seen = static fn () => [
    'server_worker' => $_SERVER['FRANKENPHP_WORKER'] ?? null,
    'server_custom' => $_SERVER['WORKER_ONLY'] ?? null,
    'server_site' => $_SERVER['FROM_CONFIG'] ?? null,
    'server_process' => $_SERVER['PHP_WORKER_TEST_ENV'] ?? null,
    'getenv_custom' => getenv('WORKER_ONLY'),
    'getenv_process' => getenv('PHP_WORKER_TEST_ENV'),
];
$boot = $seen();
while (frankenphp_handle_request(function () use ($boot, $seen) {
    header('Content-Type: application/json');
    echo json_encode(['boot' => $boot, 'request' => $seen() + ['script' => $_SERVER['SCRIPT_NAME']]]);
})) {
}
