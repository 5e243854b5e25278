<?php
// A large response: ?mb= megabytes (default 30) in 64 KB writes; with ?pause_ms=, the
// first write is flushed and the script pauses before the rest.
header('Content-Type: application/octet-stream');
$chunk = str_repeat('x', 65536);
for ($i = 0, $n = (int) ($_GET['mb'] ?? 30) * 16; $i < $n; $i++) {
    echo $chunk;
    if ($i === 0 && isset($_GET['pause_ms'])) {
        flush();
        usleep((int) $_GET['pause_ms'] * 1000);
    }
}
