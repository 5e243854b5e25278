<?php
// The app's front controller for classic mode and php-fpm: boots the app on every
// request, as public/index.php of a stock Laravel app does.
$app = require __DIR__ . '/../bootstrap/app.php';
$kernel = $app->make(Illuminate\Contracts\Http\Kernel::class);
$request = Illuminate\Http\Request::capture();
$response = $kernel->handle($request);
$response->send();
$kernel->terminate($request, $response);
