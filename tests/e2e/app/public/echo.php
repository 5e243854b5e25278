<?php
// The request as PHP parsed it.
header('Content-Type: application/json');
$files = [];
foreach ($_FILES as $field => $f) {
    $files[$field] = [
        'name' => $f['name'],
        'size' => $f['size'],
        'error' => $f['error'],
        'tmp_name' => $f['tmp_name'],
        'tmp_exists' => is_file($f['tmp_name']),
        'sha1' => is_file($f['tmp_name']) ? sha1_file($f['tmp_name']) : null,
    ];
}
echo json_encode([
    'method' => $_SERVER['REQUEST_METHOD'],
    'get' => $_GET,
    'post' => $_POST,
    'cookie' => $_COOKIE,
    'request' => $_REQUEST,
    'files' => $files,
], JSON_UNESCAPED_SLASHES);
