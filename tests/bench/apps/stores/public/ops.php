<?php
// One batch of store operations: ?store=local|shared|array, ?op=get|put, ?n= operations
// on 100 keys of 100-byte values. Answers "<ops> <seconds>" measured inside PHP.
$store = $_GET['store'] ?? 'shared';
$op = $_GET['op'] ?? 'get';
$n = (int) ($_GET['n'] ?? 10000);
$value = str_repeat('v', 100);
static $array = [];
$keys = [];
for ($i = 0; $i < 100; $i++) {
    $keys[] = "bench:$i";
}
switch ($store) {
    case 'array':
        // A plain PHP array, as Octane's in-thread array store keeps values.
        foreach ($keys as $k) {
            $array[$k] = $value;
        }
        $start = hrtime(true);
        if ($op === 'put') {
            for ($i = 0; $i < $n; $i++) {
                $array[$keys[$i % 100]] = $value;
            }
        } else {
            for ($i = 0; $i < $n; $i++) {
                $v = $array[$keys[$i % 100]] ?? null;
            }
        }
        break;
    default:
        $put = "php_worker_{$store}_put";
        $get = "php_worker_{$store}_get";
        foreach ($keys as $k) {
            $put($k, $value);
        }
        $start = hrtime(true);
        if ($op === 'put') {
            for ($i = 0; $i < $n; $i++) {
                $put($keys[$i % 100], $value);
            }
        } else {
            for ($i = 0; $i < $n; $i++) {
                $v = $get($keys[$i % 100]);
            }
        }
}
printf("%d %.6f", $n, (hrtime(true) - $start) / 1e9);
