<?php
// The Laravel app's worker script: boots the app once per thread (config, providers,
// routes), then serves each request with the booted kernel.
ignore_user_abort(true);

$app = require __DIR__ . '/../bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Http\Kernel::class);
$kernel->bootstrap();
$app->instance('boot_id', bin2hex(random_bytes(6))); // tells the threads apart

$handler = static function () use ($kernel): void {
    $request = Illuminate\Http\Request::capture();
    $response = $kernel->handle($request);
    $response->send(); // calls fastcgi_finish_request()
    $kernel->terminate($request, $response);
};

$max = (int) ($_SERVER['MAX_REQUESTS'] ?? 0);
for ($n = 0; ($max <= 0 || $n < $max) && frankenphp_handle_request($handler); $n++) {
}
