<?php

// Through PHP's error_log(), which php_worker writes to Caddy's log.
return [
    'default' => 'errorlog',
    'channels' => [
        'errorlog' => ['driver' => 'errorlog', 'level' => 'debug'],
    ],
];
