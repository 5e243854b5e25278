<?php

return [
    'name' => 'php_worker Laravel test',
    'env' => env('APP_ENV', 'production'),
    'debug' => true,
    'url' => 'http://localhost',
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',
    // A fixed key: this app only ever runs in tests and benchmarks.
    'key' => 'base64:cGhwX3dvcmtlciB0ZXN0IGtleSwgbm8gc2VjcmV0ISE=',
    'cipher' => 'AES-256-CBC',
    'providers' => [
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Cookie\CookieServiceProvider::class, // the `web` group (/page)
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Illuminate\Session\SessionServiceProvider::class,
        Illuminate\View\ViewServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class, // artisan migrate
        Illuminate\Foundation\Providers\FoundationServiceProvider::class, // Laravel 11+: the console schedule
        Illuminate\Queue\QueueServiceProvider::class, // the queue commands artisan registers; /redis/queue
        Illuminate\Redis\RedisServiceProvider::class, // /redis/*: phpredis
        PhpWorker\Laravel\PhpWorkerCacheServiceProvider::class,
    ],
    'aliases' => [],
];
