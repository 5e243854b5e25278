<?php
// Keeps its thread busy in PHP code until told to stop (or 20 s).
$until = microtime(true) + (float) ($_GET['busy'] ?? 20);
$x = 0;
while (microtime(true) < $until) {
    $x = ($x + 1) % 1000;
}
echo 'done';
