<?php
function spin(float $seconds): int {
    $end = microtime(true) + $seconds;
    for ($n = 0; microtime(true) < $end; $n++) {
    }
    return $n;
}
