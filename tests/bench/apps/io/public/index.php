<?php
// Classic mode (php-fpm): a persistent connection per process.
require __DIR__ . '/../queries.php';
header('Content-Type: application/json');
echo json_encode(bench_request(bench_db(), (int) ($_GET['user'] ?? random_int(1, 100))));
