<?php
// What arrived of an upload, and when the script started (to tell a body read before
// PHP ran from one PHP read as it came).
$started = microtime(true);
$error = error_get_last()['message'] ?? null; // PHP's own, from reading the body
$files = [];
foreach ($_FILES as $field => $f) {
    $files[$field] = ['size' => $f['size'], 'error' => $f['error'],
                      'sha1' => is_file($f['tmp_name']) ? sha1_file($f['tmp_name']) : null];
}
$input = ($_SERVER['REQUEST_METHOD'] === 'PUT') ? file_get_contents('php://input') : '';
header('Content-Type: application/json');
echo json_encode([
    'started' => $started,
    'content_length' => $_SERVER['CONTENT_LENGTH'] ?? null,
    'post' => array_map(fn ($v) => is_string($v) ? sha1($v) : $v, $_POST),
    'files' => $files,
    'input_length' => strlen($input),
    'input_sha1' => sha1($input),
    'error' => $error,
]);
