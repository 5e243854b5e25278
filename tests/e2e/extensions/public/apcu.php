<?php
require_once __DIR__ . '/../thread.php';
// What APCu holds under ?k=, read on a classic thread.
header('Content-Type: application/json');
echo json_encode(['thread' => thread_id(), 'value' => apcu_fetch((string) ($_GET['k'] ?? ''))]);
