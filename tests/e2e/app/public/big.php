<?php
// A large response: ?mb= megabytes (default 30) in 64 KB writes.
header('Content-Type: application/octet-stream');
$chunk = str_repeat('x', 65536);
for ($i = 0, $n = (int) ($_GET['mb'] ?? 30) * 16; $i < $n; $i++) {
    echo $chunk;
}
