<?php
// Routes exercising the php_worker cache store and PhpWorker\Table; every answer is
// JSON and says which worker thread (boot) served it.
use Illuminate\Http\Request;
use Illuminate\Support\Carbon;
use Illuminate\Support\Facades\Cache;
use Illuminate\Support\Facades\Route;
use PhpWorker\Table;

// The value a request names by ?type= and ?v=.
$value = static function (Request $r): mixed {
    $v = (string) $r->query('v', '');
    return match ($r->query('type', 'string')) {
        'string' => $v,
        'int' => (int) $v,
        'float' => (float) $v,
        'bool' => $v === 'true',
        'null' => null,
        'array' => ['v' => $v, 'list' => [1, 2, 3], 'nested' => ['x' => 1.5, 'yes' => true, 'none' => null]],
        'carbon' => Carbon::parse($v),
        'object' => (object) ['v' => $v, 'list' => [1, 2]],
    };
};
// A TTL from ?ttl=, or null (forever) without it.
$ttl = static fn (Request $r): ?int => $r->query('ttl') === null ? null : (int) $r->query('ttl');
$answer = static fn (array $data): array => $data + ['boot' => app()->bound('boot_id') ? app('boot_id') : null];

Route::get('/put', fn (Request $r) => $answer(['stored' => Cache::put($r->query('k'), $value($r), $ttl($r))]));

Route::get('/get', function (Request $r) use ($value, $answer) {
    $got = Cache::get($r->query('k'));
    $data = ['type' => get_debug_type($got), 'value' => $got];
    if ($r->query('type') !== null) {
        $expected = $value($r);
        $data += ['equal' => $got == $expected, 'identical' => $got === $expected];
    }
    return $answer($data);
});

Route::get('/add', fn (Request $r) => $answer(['added' => Cache::add($r->query('k'), $value($r), $ttl($r))]));
Route::get('/inc', fn (Request $r) => $answer(['value' => Cache::increment($r->query('k'), (int) $r->query('by', 1))]));
Route::get('/dec', fn (Request $r) => $answer(['value' => Cache::decrement($r->query('k'), (int) $r->query('by', 1))]));
Route::get('/forget', fn (Request $r) => $answer(['forgotten' => Cache::forget($r->query('k'))]));
Route::get('/flush', fn () => $answer(['flushed' => Cache::flush()]));
Route::get('/forever', fn (Request $r) => $answer(['stored' => Cache::forever($r->query('k'), $value($r))]));

Route::get('/putmany', function (Request $r) use ($ttl, $answer) {
    $p = (string) $r->query('p');
    $values = ["{$p}a" => 1, "{$p}b" => 'two', "{$p}c" => ['three' => 3]];
    return $answer(['stored' => Cache::putMany($values, $ttl($r))]);
});
Route::get('/many', fn (Request $r) => $answer(['values' => Cache::many(explode(',', (string) $r->query('keys')))]));

Route::get('/remember', fn (Request $r) => $answer([
    'value' => Cache::remember($r->query('k'), 60, fn () => ['computed_by' => app('boot_id'), 'at' => microtime(true)]),
]));

// What the store wrote in the process's table, under its own key.
Route::get('/raw', fn (Request $r) => $answer([
    'value' => php_worker_shared_get($r->query('k')),
    'prefix' => Cache::getStore()->getPrefix(),
    'store' => get_class(Cache::getStore()),
]));

Route::get('/table/{op}', function (Request $r, string $op) use ($answer) {
    $table = new Table((string) $r->query('t', 'test'));
    $key = (string) $r->query('key');
    $by = (string) $r->query('by', '1');
    $by = str_contains($by, '.') ? (float) $by : (int) $by;
    $result = match ($op) {
        'set' => $table->set($key, json_decode((string) $r->query('row'), true, flags: JSON_THROW_ON_ERROR)),
        'get' => $table->get($key, $r->query('col')),
        'incr' => $table->incr($key, (string) $r->query('col'), $by),
        'decr' => $table->decr($key, (string) $r->query('col'), $by),
        'del' => $table->del($key),
        'exists' => $table->exists($key),
        'count' => $table->count(),
    };
    return $answer(['result' => $result, 'type' => get_debug_type($result)]);
});

// The store benchmark (tests/bench): ?store= a cache store of config/cache.php, ?op=
// get|put, ?n= operations on 100 keys of 100-byte values. Answers "<ops> <seconds>".
Route::get('/bench', function (Request $r) {
    $store = Cache::store((string) $r->query('store', 'php_worker'));
    $n = (int) $r->query('n', 1000);
    $value = str_repeat('v', 100);
    for ($i = 0; $i < 100; $i++) {
        $store->put("bench:$i", $value, 3600);
    }
    $start = hrtime(true);
    if ($r->query('op') === 'put') {
        for ($i = 0; $i < $n; $i++) {
            $store->put('bench:' . ($i % 100), $value, 3600);
        }
    } else {
        for ($i = 0; $i < $n; $i++) {
            $store->get('bench:' . ($i % 100));
        }
    }
    return new Illuminate\Http\Response(sprintf('%d %.6f', $n, (hrtime(true) - $start) / 1e9), 200, ['Content-Type' => 'text/plain']);
});

// The Octane-shaped worker (public/frankenphp-worker.php): what the worker sees of the
// environment Octane passes, and the code version it booted.
Route::get('/octane', fn () => [
    'boot_id' => app()->bound('boot_id') ? app('boot_id') : null,
    'boot_version' => app()->bound('boot_version') ? app('boot_version') : null,
    'worker' => $_SERVER['FRANKENPHP_WORKER'] ?? null,
    'octane' => $_SERVER['LARAVEL_OCTANE'] ?? null,
    'max_requests' => $_SERVER['MAX_REQUESTS'] ?? null,
    'base_path' => base_path(),
    'script_name' => $_SERVER['SCRIPT_NAME'] ?? null,
    'uri' => request()->getRequestUri(),
    'time_limit' => (int) ini_get('max_execution_time'),
    'sapi' => PHP_SAPI,
]);
// A record as Octane's request stream writes it, and one through frankenphp_log().
Route::get('/octane/log', function () {
    error_log(json_encode(['type' => 'request', 'method' => 'GET', 'url' => '/octane/log', 'statusCode' => 200]), 4);
    frankenphp_log('a frankenphp_log line', FRANKENPHP_LOG_LEVEL_WARN, ['order' => 42, 'user' => ['id' => 7]]);
    return ['logged' => true];
});
// A handler that ends the worker script with a status, as a fatal path would.
Route::get('/octane/exit', function () {
    exit(3);
});

// A page through the `web` middleware group (app/Http/Kernel.php): encrypted cookies, a
// file session that counts the visits, a CSRF token and a Blade view. The benchmark's
// Laravel workload requests it.
Route::middleware('web')->get('/page', function (Request $r) {
    $visits = $r->session()->increment('visits');
    $items = [];
    for ($i = 1; $i <= 20; $i++) {
        $items[] = ['name' => "Item $i", 'price' => $i * 1.25];
    }
    return response()->view('page', ['title' => 'php_worker on Laravel', 'visits' => $visits, 'items' => $items])
        ->header('X-Boot', app()->bound('boot_id') ? app('boot_id') : '');
});

// What OPcache's JIT does on this thread (the benchmark checks that its JIT variant runs it).
Route::get('/opcache/jit', fn () => ['jit' => ((function_exists('opcache_get_status') ? opcache_get_status(false) : null) ?: [])['jit'] ?? null]);

// Octane-shaped fan-out to the task worker (task-worker.php): closures run on its booted
// threads at once; ?fail=1 adds one that throws.
Route::get('/concurrently', function (Request $r) use ($answer) {
    $ms = (int) $r->query('ms', 300);
    $tasks = [
        'config' => fn () => config('app.name') . ' on ' . app('boot_id'),
        'sum' => fn () => array_sum([1, 2, 3]),
        'slow1' => function () use ($ms) {
            usleep($ms * 1000);
            return 'slept';
        },
        'slow2' => function () use ($ms) {
            usleep($ms * 1000);
            return 'slept';
        },
    ];
    if ($r->query('fail')) {
        $tasks['bad'] = fn () => throw new DomainException('no such order');
    }
    $start = microtime(true);
    try {
        $results = PhpWorker\Tasks::concurrently($tasks, 5000);
    } catch (Throwable $e) {
        return $answer(['error' => get_class($e), 'message' => $e->getMessage()]);
    }
    return $answer(['results' => $results, 'ms' => (microtime(true) - $start) * 1000]);
});

// Redis through phpredis (igbinary serializer, config/database.php): Laravel's cache, its
// session and its queue, as a production app keeps them.
Route::get('/redis/cache', fn (Request $r) => $answer([
    'value' => Cache::store('redis')->increment((string) $r->query('k')),
    'serializer' => Illuminate\Support\Facades\Redis::connection()->client()->getOption(Redis::OPT_SERIALIZER),
]));
Route::get('/redis/cache/put', fn (Request $r) => $answer([
    'stored' => Cache::store('redis')->put((string) $r->query('k'), ['v' => (string) $r->query('v'), 'list' => [1, 2]], 60),
]));
Route::get('/redis/cache/get', fn (Request $r) => $answer(['value' => Cache::store('redis')->get((string) $r->query('k'))]));
Route::middleware('web')->get('/redis/session', function (Request $r) use ($answer) {
    $n = $r->session()->get('n', 0) + 1;
    $r->session()->put('n', $n);
    return $answer(['n' => $n, 'driver' => config('session.driver'),
        'instance' => $_SERVER['INSTANCE'] ?? null, 'code' => $_SERVER['CODE_VERSION'] ?? null]);
});
Route::get('/redis/queue/push', function (Request $r) use ($answer) {
    Illuminate\Support\Facades\Queue::connection('redis')->push('App\Jobs\Record', ['id' => (string) $r->query('id')]);
    return $answer(['pushed' => (string) $r->query('id')]);
});
// Runs every queued job; `done` counts the jobs of ids starting with ?run= that ran.
Route::get('/redis/queue/work', function (Request $r) use ($answer) {
    $ran = 0;
    while ($job = Illuminate\Support\Facades\Queue::connection('redis')->pop()) {
        $job->fire();
        $ran++;
    }
    $run = (string) $r->query('run');
    $done = array_filter(Illuminate\Support\Facades\Redis::connection()->smembers('jobs_done'),
        static fn ($id) => str_starts_with((string) $id, $run));
    return $answer(['ran' => $ran, 'done' => count($done)]);
});

// The runs of the jobs whose ids start with ?run=, as App\Jobs\Record logs them: how many
// times each id ran, and how many jobs each instance ran.
Route::get('/redis/queue/runs', function (Request $r) use ($answer) {
    $run = (string) $r->query('run');
    $times = $where = [];
    foreach (Illuminate\Support\Facades\Redis::connection()->lrange('jobs_runs', 0, -1) as $line) {
        $entry = json_decode($line, true);
        if (str_starts_with($entry['id'], $run)) {
            $times[$entry['id']] = ($times[$entry['id']] ?? 0) + 1;
            $where[$entry['instance'] ?? '?'] = ($where[$entry['instance'] ?? '?'] ?? 0) + 1;
        }
    }
    return $answer(['times' => $times, 'where' => $where]);
});

// A controller action, for the debugging test's breakpoint.
Route::get('/greet', [App\Http\Controllers\GreetingController::class, 'show']);
