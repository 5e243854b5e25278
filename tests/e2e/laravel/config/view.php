<?php

return [
    'paths' => [dirname(__DIR__) . '/resources/views'],
    'compiled' => env('LARAVEL_CACHE_DIR', sys_get_temp_dir()) . '/views',
];
