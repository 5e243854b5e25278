<?php

// Jobs run where they are pushed (sync) unless QUEUE_CONNECTION=redis keeps them in Redis
// for /redis/queue/work to run.
return [
    'default' => env('QUEUE_CONNECTION', 'sync'),
    'connections' => [
        'sync' => ['driver' => 'sync'],
        'redis' => [
            'driver' => 'redis',
            'connection' => 'default',
            'queue' => 'default',
            'retry_after' => 90,
            'block_for' => null,
        ],
    ],
    'failed' => ['driver' => 'null'],
];
