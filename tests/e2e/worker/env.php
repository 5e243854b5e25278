<?php
// What the worker saw while it booted, and what each request sees.
$seen = static fn () => [
    'server_worker' => $_SERVER['FRANKENPHP_WORKER'] ?? null,
    'server_custom' => $_SERVER['WORKER_ONLY'] ?? null,
    'server_site' => $_SERVER['FROM_CONFIG'] ?? null,
    'server_process' => $_SERVER['PHP_WORKER_TEST_ENV'] ?? null,
    'getenv_custom' => getenv('WORKER_ONLY'),
    'getenv_process' => getenv('PHP_WORKER_TEST_ENV'),
    // The pool's env wins over a CGI variable, and is in getenv()'s whole array too.
    'server_software' => $_SERVER['SERVER_SOFTWARE'] ?? null,
    'getenv_all_custom' => getenv()['WORKER_ONLY'] ?? null,
    // A value with a placeholder comes with each request.
    'server_host' => $_SERVER['WORKER_HOST'] ?? null,
    'getenv_host' => getenv('WORKER_HOST'),
];
$boot = $seen();
// The boot request's own CGI variables, written by the same Go code as every request's.
$bootServer = array_intersect_key($_SERVER, array_flip(['SCRIPT_NAME', 'SCRIPT_FILENAME', 'DOCUMENT_ROOT', 'GATEWAY_INTERFACE', 'REQUEST_METHOD']));
while (frankenphp_handle_request(function () use ($boot, $bootServer, $seen) {
    header('Content-Type: application/json');
    echo json_encode(['boot' => $boot, 'boot_server' => $bootServer, 'request' => $seen() + ['script' => $_SERVER['SCRIPT_NAME']]]);
})) {
}
