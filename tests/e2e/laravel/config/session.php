<?php

// File sessions, as a fresh Laravel 8 app has them; the files go under LARAVEL_CACHE_DIR
// (bootstrap/app.php), out of the repository. SESSION_DRIVER=redis keeps them in Redis.
return [
    'driver' => env('SESSION_DRIVER', 'file'),
    'connection' => null,
    'lifetime' => 120,
    'expire_on_close' => false,
    'encrypt' => false,
    'files' => env('LARAVEL_CACHE_DIR', sys_get_temp_dir()) . '/sessions',
    'lottery' => [2, 100],
    'cookie' => 'laravel_session',
    'path' => '/',
    'domain' => null,
    'secure' => false,
    'http_only' => true,
    'same_site' => 'lax',
];
