<?php
// The Laravel app's worker script: boots the app once per thread (config, providers,
// routes), then serves each request with the booted kernel.
ignore_user_abort(true);

$app = require __DIR__ . '/../bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Http\Kernel::class);
$kernel->bootstrap();
$app->instance('boot_id', bin2hex(random_bytes(6))); // tells the threads apart

$handler = static function () use ($app, $kernel): void {
    $request = Illuminate\Http\Request::capture();
    $response = $kernel->handle($request);
    $response->send(); // calls fastcgi_finish_request()
    $kernel->terminate($request, $response);
    // The booted app's singletons outlive the request. The session store keeps the
    // attributes it loaded (the next visitor, without a cookie, would get them) and the
    // cookie jar its queued cookies: reset both, as Octane's listeners do.
    if ($app->resolved('session')) {
        $app['session']->forgetDrivers();
    }
    if ($app->resolved('cookie')) {
        $app['cookie']->flushQueuedCookies();
    }
};

$max = (int) ($_SERVER['MAX_REQUESTS'] ?? 0);
for ($n = 0; ($max <= 0 || $n < $max) && frankenphp_handle_request($handler); $n++) {
}
