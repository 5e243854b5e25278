<?php

return [
    'default' => 'php_worker',
    'stores' => [
        'php_worker' => ['driver' => 'php_worker', 'prefix' => 'lt'],
        'array' => ['driver' => 'array'],
    ],
    'prefix' => 'laravel_test',
];
