<?php
// Worker mode: the bootstrap runs once per thread.
$app = require __DIR__ . '/bootstrap.php';
$handler = static function () use ($app) {
    header('Content-Type: application/json');
    echo $app->handle($_SERVER['REQUEST_URI']);
};
$max = (int) ($_SERVER['MAX_REQUESTS'] ?? 0);
for ($n = 0; ($max === 0 || $n < $max) && frankenphp_handle_request($handler); $n++) {
}
