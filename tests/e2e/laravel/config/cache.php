<?php

return [
    'default' => env('CACHE_DRIVER', 'php_worker'),
    'stores' => [
        'php_worker' => ['driver' => 'php_worker', 'prefix' => 'lt'],
        'array' => ['driver' => 'array'],
        'redis' => ['driver' => 'redis', 'connection' => 'default'],
    ],
    'prefix' => 'laravel_test',
];
