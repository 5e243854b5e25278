<?php
// Every extension check (tests/extensions/checks.php), on this classic thread.
require_once __DIR__ . '/../../../extensions/checks.php';
require_once __DIR__ . '/../thread.php';
header('Content-Type: application/json');
echo json_encode(['thread' => thread_id(), 'checks' => php_worker_extension_checks()]);
