<?php
// A large response in one write: ?mb= megabytes (default 2).
header('Content-Type: application/octet-stream');
echo str_repeat('x', (int) ($_GET['mb'] ?? 2) << 20);
