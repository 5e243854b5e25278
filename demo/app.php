<?php
// The php_worker demo app: a few routes, no database. demo_handle() serves one request;
// $worker describes the booted worker script serving it, or is null in classic mode.
declare(strict_types=1);

function demo_thread_id(): string
{
    // Made once per PHP thread and kept in the thread's local store, which outlives
    // worker restarts on that thread.
    $id = php_worker_local_get('demo:thread');
    if ($id === null) {
        $id = substr(bin2hex(random_bytes(3)), 0, 6);
        php_worker_local_put('demo:thread', $id);
    }
    return $id;
}

function demo_handle(?array $worker): void
{
    $path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH) ?: '/';
    switch ($path) {
        case '/':
            header('Content-Type: text/html; charset=utf-8');
            $rows = [
                'Mode' => $worker ? 'worker (the app booted once on this thread)' : 'classic (one script run per request)',
                'Requests served by the shared table (all threads)' => (string) php_worker_shared_increment('demo:visits'),
                'Requests served by this thread (its local store)' => (string) php_worker_local_increment('demo:visits'),
                'PHP thread' => demo_thread_id(),
                'Requests served by this booted worker script' => $worker ? (string) $worker['served'] : '–',
                'Worker booted' => $worker ? date('H:i:s', (int) $worker['booted_at']) : '–',
                'PHP version' => PHP_VERSION . (PHP_ZTS ? ' (thread safe)' : ''),
                'OPcache' => function_exists('opcache_get_status') && @opcache_get_status(false) ? 'on' : 'off',
            ];
            echo "<!doctype html><title>php_worker demo</title><link rel=stylesheet href=/style.css>\n";
            echo "<h1>Hello from php_worker</h1>\n<table>\n";
            foreach ($rows as $k => $v) {
                printf("<tr><th align=left>%s</th><td>%s</td></tr>\n", htmlspecialchars($k), htmlspecialchars($v));
            }
            echo "</table>\n<p>Reload the page: the shared counter counts every request, the thread's counter only ",
                "those of the thread that served it. Try <a href=/hello?name=you>/hello?name=you</a>, ",
                "<a href=/stream>/stream</a>, <a href=/info.php>/info.php</a> (a classic script) or ",
                "<a href=/style.css>a static file</a>.</p>\n";
            break;
        case '/hello':
            header('Content-Type: text/plain');
            echo 'Hello, ', $_GET['name'] ?? 'world', "!\n";
            break;
        case '/stream':
            header('Content-Type: text/plain');
            for ($i = 1; $i <= 5; $i++) {
                echo "tick $i\n";
                flush();
                usleep(200_000);
            }
            break;
        default:
            http_response_code(404);
            header('Content-Type: text/plain');
            echo "Not found: $path\n";
    }
}
