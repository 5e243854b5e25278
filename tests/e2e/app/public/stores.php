<?php
// Exercises the php_worker_local_* / php_worker_shared_* functions: ?case= names a
// scenario, ?scope= local or shared; the answer is JSON.
header('Content-Type: application/json');
$scope = $_GET['scope'] ?? 'shared';
$f = fn (string $op) => "php_worker_{$scope}_{$op}";
$prefix = $_GET['prefix'] ?? 't';

// A closure, not a function: in worker mode this file runs again on every request.
$storeValues = function (): array {
    return [
        'null' => null, 'true' => true, 'false' => false, 'zero' => 0, 'negative' => -5, 'max' => PHP_INT_MAX,
        'min' => PHP_INT_MIN, 'float' => 1.5, 'tiny' => -0.0001, 'empty' => '', 'binary' => "bin\0ary\xff",
        'list' => [1, 2, 3], 'empty_array' => [],
        'nested' => ['b' => ['c' => [1, 'x' => [true]]], 5 => 'five', '7' => 'seven', 'z' => null, 'a' => 1.25],
        'order' => ['z' => 1, 'a' => 2, 10 => 3, 2 => 4],
    ];
};

switch ($_GET['case'] ?? '') {
    case 'roundtrip':
        $out = [];
        foreach ($storeValues() as $name => $value) {
            $f('put')("$prefix-$name", $value);
            $out[$name] = $f('get')("$prefix-$name") === $value;
        }
        $date = new DateTimeImmutable('2024-02-29 12:34:56.789', new DateTimeZone('Europe/Paris'));
        $object = new stdClass();
        $object->name = 'x';
        $object->list = [1, [2]];
        $objects = ['date' => $date, 'object' => $object, 'array_object' => new ArrayObject(['k' => 'v']),
            'mixed' => ['when' => $date, 'n' => 1]];
        foreach ($objects as $name => $value) {
            $f('put')("$prefix-$name", $value);
            $back = $f('get')("$prefix-$name");
            $out[$name] = $back == $value && $back !== $value;
        }
        echo json_encode($out);
        break;
    case 'api':
        $k = "$prefix-api";
        $out = [];
        $f('forget')($k);
        $out['missing'] = $f('get')($k);
        $out['default'] = $f('get')($k, 'fallback');
        $out['put'] = $f('put')($k, 'v1');
        $out['get'] = $f('get')($k);
        $out['add_existing'] = $f('add')($k, 'v2');
        $out['still'] = $f('get')($k);
        $out['forget'] = $f('forget')($k);
        $out['forget_again'] = $f('forget')($k);
        $out['add_missing'] = $f('add')($k, 'v3');
        $out['after_add'] = $f('get')($k);
        $out['inc_new'] = $f('increment')("$k-n");
        $out['inc_by'] = $f('increment')("$k-n", 10);
        $out['dec'] = $f('increment')("$k-n", -4);
        $out['inc_string'] = $f('increment')($k);
        $f('put')("$k-float", 1.5);
        $out['inc_float'] = $f('increment')("$k-float");
        $f('put')("$k-max", PHP_INT_MAX);
        $out['inc_overflow'] = $f('increment')("$k-max");
        $out['get_int'] = $f('get')("$k-n");
        $before = $f('count')();
        $f('put')("$k-extra", [1]);
        $out['count_grows'] = $f('count')() - $before;
        $out['flush'] = $f('flush')();
        $out['count_after_flush'] = $f('count')();
        $out['gone'] = $f('get')($k, 'gone');
        echo json_encode($out);
        break;
    case 'errors':
        $out = [];
        $try = function (callable $call) {
            try {
                $call();
                return 'no error';
            } catch (Throwable $e) {
                return get_class($e) . ': ' . $e->getMessage();
            }
        };
        $out['closure'] = $try(fn () => $f('put')('with-closure', fn () => 1));
        $out['nested_closure'] = $try(fn () => $f('put')('nested', ['a' => [fn () => 1]]));
        $out['resource'] = $try(fn () => $f('add')('res', fopen('php://memory', 'r')));
        $out['empty_key'] = $try(fn () => $f('put')('', 1));
        $out['long_key'] = $try(fn () => $f('get')(str_repeat('k', 251)));
        $out['longest_key'] = $try(fn () => $f('put')(str_repeat('k', 250), 1));
        $out['negative_ttl'] = $try(fn () => $f('put')('ttl', 1, -1));
        $out['refused_not_stored'] = $f('get')('with-closure', 'absent');
        echo json_encode($out);
        break;
    case 'ttl':
        $k = "$prefix-ttl";
        $f('forget')($k);
        $out = ['put' => $f('put')($k, 'short', 1), 'now' => $f('get')($k)];
        $count = $f('count')();
        usleep(1100000);
        $out['later'] = $f('get')($k, 'expired');
        $out['count_drop'] = $count - $f('count')();
        $out['add_after_expiry'] = $f('add')($k, 'again');
        $f('put')("$k-n", 5, 1);
        // touch(): one entry kept past its first expiry, one made to never expire; a missing
        // one and an expired one are not touched.
        $f('put')("$k-kept", 'kept', 1);
        $f('put')("$k-forever", 'forever', 1);
        $out['touch'] = $f('touch')("$k-kept", 60) && $f('touch')("$k-forever", 0);
        $out['touch_missing'] = $f('touch')("$k-none", 60);
        $f('put')("$k-gone", 'gone', 1);
        usleep(1100000);
        $out['inc_after_expiry'] = $f('increment')("$k-n");
        $out['touched'] = [$f('get')("$k-kept"), $f('get')("$k-forever")];
        $out['touch_expired'] = $f('touch')("$k-gone", 60);
        echo json_encode($out);
        break;
    case 'counter':
        // The thread's identity lives in its local store; the worker's served count in
        // the script (see the worker fixture).
        $id = php_worker_local_get('thread-id');
        if ($id === null) {
            $id = bin2hex(random_bytes(6));
            php_worker_local_put('thread-id', $id);
        }
        echo json_encode(['thread' => $id, 'local' => php_worker_local_increment('hits'),
            'shared' => php_worker_shared_increment('hits')]);
        break;
    case 'inc':
        $n = (int) ($_GET['n'] ?? 100);
        for ($i = 0; $i < $n; $i++) {
            $f('increment')($_GET['key']);
            $f('add')($_GET['key'] . '-once', $i);
        }
        echo json_encode(['done' => $n]);
        break;
    case 'flush':
        echo json_encode($f('flush')());
        break;
    case 'put':
        echo json_encode($f('put')($_GET['key'], $_GET['value'] ?? str_repeat('v', (int) ($_GET['size'] ?? 10))));
        break;
    case 'get':
        $v = $f('get')($_GET['key'], false);
        echo json_encode(is_string($v) && strlen($v) > 100 ? ['len' => strlen($v)] : $v);
        break;
    case 'fill':
        $stored = 0;
        for ($i = 0; $i < (int) $_GET['n']; $i++) {
            $stored += $f('put')("$prefix-fill-$i", str_repeat('x', (int) $_GET['size'])) ? 1 : 0;
        }
        echo json_encode(['stored' => $stored, 'first' => $f('get')("$prefix-fill-0") !== null,
            'count' => $f('count')()]);
        break;
    case 'churn':
        $value = str_repeat('c', 100);
        for ($i = 0; $i < 100000; $i++) {
            $f('put')("churn-$i", $value);
            $f('forget')("churn-$i");
        }
        echo json_encode(['count' => $f('count')()]);
        break;
    case 'big-get':
        ini_set('memory_limit', $_GET['limit'] ?? '16M');
        $v = $f('get')($_GET['key']);
        echo json_encode(['len' => strlen($v)]);
        break;
    default:
        http_response_code(400);
        echo json_encode(['error' => 'unknown case']);
}
