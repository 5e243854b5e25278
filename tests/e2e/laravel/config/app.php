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
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class, // artisan migrate
        Illuminate\Queue\QueueServiceProvider::class, // the queue commands artisan registers
        PhpWorker\Laravel\PhpWorkerCacheServiceProvider::class,
    ],
    'aliases' => [],
];
