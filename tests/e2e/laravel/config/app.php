<?php

return [
    'name' => 'php_worker Laravel test',
    'env' => env('APP_ENV', 'production'),
    'debug' => true,
    'url' => 'http://localhost',
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',
    'providers' => [
        Illuminate\Cache\CacheServiceProvider::class,
        PhpWorker\Laravel\PhpWorkerCacheServiceProvider::class,
    ],
    'aliases' => [],
];
