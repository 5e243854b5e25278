<?php
// Shaped after Laravel Octane's bin/frankenphp-worker.php: guard, eager boot, a
// clone of the booted application per request, flushed after it.
if (empty($_SERVER['FRANKENPHP_WORKER']) || !function_exists('frankenphp_handle_request')) {
    echo 'FrankenPHP must be in worker mode to use this script.';
    exit(1);
}
ignore_user_abort(true);

$basePath = $_SERVER['APP_BASE_PATH'] ?? $_ENV['APP_BASE_PATH'] ?? null;
if ($basePath === null) {
    error_log("Cannot find application base path.");
    exit(11);
}
$app = require $basePath . '/app/bootstrap.php';
$maxRequests = (int) ($_ENV['MAX_REQUESTS'] ?? $_SERVER['MAX_REQUESTS'] ?? 1000);

$handler = static function () use ($app) {
    $sandbox = clone $app;
    $sandbox->instance('request', ['uri' => $_SERVER['REQUEST_URI'], 'user' => $_GET['user'] ?? null]);
    $cart = $sandbox->make('cart');
    if (isset($_GET['add'])) {
        $cart[] = $_GET['add'];
    }
    $body = json_encode([
        'boot_id' => $sandbox->bootId,
        'boots_in_this_thread' => Container::$boots,
        'user' => $sandbox->make('request')['user'],
        'cart' => $cart->getArrayCopy(),
        'base_has_request' => $app->has('request'),
        'base_has_cart' => $app->has('cart'),
        'max_requests' => $GLOBALS['maxRequests'],
    ]);
    header('Content-Type: application/json');
    echo $body;
    fastcgi_finish_request(); // what Symfony's Response::send() does under Octane
    $sandbox->flushScoped();
    unset($sandbox);
};

$requestCount = 0;
while ($requestCount < $maxRequests && frankenphp_handle_request($handler)) {
    $requestCount++;
}
gc_collect_cycles();
