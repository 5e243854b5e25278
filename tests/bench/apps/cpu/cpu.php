<?php
// CPU-bound PHP with no I/O: calls, arrays and strings, objects. Prints its milliseconds.
// The bench runs it with a ZTS and an NTS PHP of the same version (zts_cost in bench.py).
function fib($n) { return $n < 2 ? $n : fib($n - 1) + fib($n - 2); }
$t = hrtime(true);
fib(27);
$a = [];
for ($i = 0; $i < 300000; $i++) {
    $a["k$i"] = str_repeat('x', $i % 10);
}
$s = 0;
foreach ($a as $k => $v) {
    $s += strlen($k . $v);
}
class Point { public $x = 1; function plus($y) { return $this->x + $y; } }
$o = new Point;
for ($i = 0; $i < 1000000; $i++) {
    $s += $o->plus($i);
}
echo round((hrtime(true) - $t) / 1e6), "\n";
