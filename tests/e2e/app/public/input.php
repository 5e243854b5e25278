<?php
// Reads php://input in chunks; answers its length and sha1, and this thread's peak memory.
$in = fopen('php://input', 'rb');
$ctx = hash_init('sha1');
$n = 0;
while (!feof($in)) {
    $chunk = fread($in, 65536);
    if ($chunk === false) {
        break;
    }
    $n += strlen($chunk);
    hash_update($ctx, $chunk);
}
header('Content-Type: application/json');
echo json_encode(['length' => $n, 'sha1' => hash_final($ctx)]);
