<?php

return [
    'default' => 'sqlite',
    'connections' => [
        'sqlite' => [
            'driver' => 'sqlite',
            'database' => env('DB_DATABASE', ':memory:'),
            'prefix' => '',
            'foreign_key_constraints' => true,
        ],
    ],
    'migrations' => 'migrations',
    // phpredis with its igbinary serializer, as production apps tune it; the tests start
    // a Redis server on REDIS_PORT (tests/e2e/test_extensions.py).
    'redis' => [
        'client' => 'phpredis',
        'options' => [
            'prefix' => 'php_worker_test:',
            'serializer' => defined('Redis::SERIALIZER_IGBINARY') ? Redis::SERIALIZER_IGBINARY : 0,
        ],
        'default' => [
            'host' => '127.0.0.1',
            'port' => (int) env('REDIS_PORT', 6379),
            'database' => 0,
            'read_timeout' => 5,
        ],
    ],
];
