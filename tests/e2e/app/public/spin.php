<?php
// Keeps a CPU busy for ?seconds= (default 0.1).
$end = microtime(true) + (float) ($_GET['seconds'] ?? 0.1);
$n = 0;
while (microtime(true) < $end) {
    $n++;
}
echo 'spun';
