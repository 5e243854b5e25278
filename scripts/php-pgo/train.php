<?php
// PHP's profile-guided optimisation training run (scripts/build-php.sh): run by the
// instrumented build's CLI, so that GCC learns which branches of the engine, OPcache and
// the extensions real requests take. Small on purpose: the shapes of the bench's
// workloads, not the bench itself.
//
//   php train.php worker-laravel N   the test Laravel app (tests/e2e/laravel) booted once,
//                                    then N requests through its worker script
//   php train.php classic-laravel    one request through its front controller
//   php train.php hello N            N hello-world handler calls
//   php train.php data N             arrays, strings, JSON, serialize, regexes, sorting
//
// The Laravel modes need LARAVEL_PHP_ROOT (the framework's PHP folder).

$mode = $argv[1] ?? '';
$count = (int) ($argv[2] ?? 1);
$laravel = dirname(__DIR__, 2) . '/tests/e2e/laravel';

// The request a handler sees: the page (session, CSRF, Blade) and a controller's JSON, in
// turn, each from a new visitor (a new session).
function pgo_request(int $n): void
{
    $path = $n % 3 === 2 ? '/greet?name=pgo' : '/page';
    [$uri, $query] = array_pad(explode('?', $path, 2), 2, '');
    $_SERVER = array_merge($_SERVER, [
        'REQUEST_METHOD' => 'GET', 'REQUEST_URI' => $path, 'QUERY_STRING' => $query,
        'SCRIPT_NAME' => '/index.php', 'SCRIPT_FILENAME' => 'index.php', 'PHP_SELF' => '/index.php',
        'SERVER_NAME' => 'localhost', 'SERVER_PORT' => '80', 'HTTP_HOST' => 'localhost',
        'HTTP_ACCEPT' => 'text/html,application/json', 'HTTP_USER_AGENT' => 'php_worker-pgo',
        'REMOTE_ADDR' => '127.0.0.1', 'REQUEST_TIME' => time(), 'REQUEST_TIME_FLOAT' => microtime(true),
    ]);
    parse_str($query, $_GET);
    $_COOKIE = [];
    $_REQUEST = $_GET;
}

switch ($mode) {
case 'worker-laravel':
    $GLOBALS['pgo_left'] = $count;
    // The worker script's loop, fed by this instead of the server.
    function frankenphp_handle_request(callable $handler): bool
    {
        if ($GLOBALS['pgo_left']-- <= 0) {
            return false;
        }
        pgo_request($GLOBALS['pgo_left']);
        ob_start(static fn () => '');
        $handler();
        while (ob_get_level() > 0) {
            ob_end_clean();
        }
        return true;
    }
    $_SERVER['MAX_REQUESTS'] = $count;
    require "$laravel/public/worker.php";
    break;
case 'classic-laravel':
    pgo_request(random_int(0, 2));
    ob_start(static fn () => '');
    require "$laravel/public/index.php";
    break;
case 'hello':
    $handler = static function (): void {
        header('Content-Type: text/plain');
        echo 'Hello, world!';
    };
    ob_start(static fn () => '');
    for ($i = 0; $i < $count; $i++) {
        pgo_request($i);
        $handler();
        ob_flush();
    }
    ob_end_clean();
    break;
case 'data':
    $rows = [];
    for ($i = 0; $i < $count; $i++) {
        $key = "user:$i:" . md5((string) $i);
        $row = ['id' => $i, 'name' => ucfirst(str_repeat(chr(97 + $i % 26), 1 + $i % 12)), 'score' => $i * 1.5,
            'tags' => explode(',', 'a,b,c,' . ($i % 7)), 'at' => date(DATE_ATOM, 1700000000 + $i)];
        $rows[$key] = $row;
        $back = json_decode(json_encode($row), true);
        $copy = unserialize(serialize($row));
        if ($back['id'] !== $copy['id'] || !preg_match('/^user:(\d+):([0-9a-f]{32})$/', $key, $m)) {
            throw new RuntimeException("training data mismatch at $i");
        }
        $rows[$key]['slug'] = strtolower(preg_replace('/[^a-z0-9]+/i', '-', $row['name'] . ' ' . $m[1]));
        if (function_exists('apcu_store')) {
            apcu_store($key, $row);
            apcu_fetch($key);
        }
    }
    uasort($rows, static fn ($a, $b) => $b['score'] <=> $a['score']);
    $names = array_map(static fn ($r) => $r['name'], array_filter($rows, static fn ($r) => $r['id'] % 2 === 0));
    echo count($names), ' ', strlen(implode(' ', $names)), ' ', sprintf('%.2f', array_sum(array_column($rows, 'score'))), "\n";
    break;
default:
    fwrite(STDERR, "usage: php train.php worker-laravel|classic-laravel|hello|data [N]\n");
    exit(2);
}
