<?php
// Every $_SERVER entry and what getenv() says for a few names, as JSON.
header('Content-Type: application/json');
$names = $_GET['getenv'] ?? [];
$env = [];
foreach ((array) $names as $n) {
    $env[$n] = getenv($n);
}
echo json_encode(['server' => $_SERVER, 'getenv' => $env], JSON_UNESCAPED_SLASHES);
