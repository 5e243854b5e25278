<?php
// Worker mode: one connection per thread, opened at boot.
require __DIR__ . '/queries.php';
$db = bench_db();
$handler = static function () use ($db) {
    header('Content-Type: application/json');
    echo json_encode(bench_request($db, (int) ($_GET['user'] ?? random_int(1, 100))));
};
while (frankenphp_handle_request($handler)) {
}
