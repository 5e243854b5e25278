<?php
// Echoes the caller's own id from query, body, cookie and header, after a short pause,
// so concurrent requests overlap on the same threads.
usleep(20000);
header('Content-Type: application/json');
echo json_encode([
    'get' => $_GET['id'] ?? null,
    'post' => $_POST['id'] ?? null,
    'cookie' => $_COOKIE['id'] ?? null,
    'header' => $_SERVER['HTTP_X_ID'] ?? null,
    'thread_leak' => $GLOBALS['leak'] ?? null,
]);
$GLOBALS['leak'] = $_GET['id'] ?? null;
