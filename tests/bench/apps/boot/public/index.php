<?php
// Classic mode (php-fpm, php_worker classic): the bootstrap runs on every request.
$app = require __DIR__ . '/../bootstrap.php';
header('Content-Type: application/json');
echo $app->handle($_SERVER['REQUEST_URI']);
