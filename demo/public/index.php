<?php
// The php_worker demo: a front controller with a few routes, no database needed.
declare(strict_types=1);

$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH) ?: '/';

switch ($path) {
    case '/':
        header('Content-Type: text/html; charset=utf-8');
        $visits = (int) ($_COOKIE['visits'] ?? 0) + 1;
        setcookie('visits', (string) $visits, ['path' => '/', 'httponly' => true, 'samesite' => 'Lax']);
        $rows = [
            'PHP version' => PHP_VERSION,
            'SAPI' => PHP_SAPI,
            'Thread safe' => PHP_ZTS ? 'yes' : 'no',
            'OPcache' => function_exists('opcache_get_status') && @opcache_get_status(false) ? 'on' : 'off',
            'Your visits' => (string) $visits,
            'Server time' => date(DATE_RFC2822),
        ];
        echo "<!doctype html><title>php_worker demo</title>\n";
        echo "<h1>Hello from php_worker</h1>\n<table>\n";
        foreach ($rows as $k => $v) {
            printf("<tr><th align=left>%s</th><td>%s</td></tr>\n", htmlspecialchars($k), htmlspecialchars($v));
        }
        echo "</table>\n<p>Try <a href=/hello?name=you>/hello?name=you</a>, ",
            "<a href=/stream>/stream</a>, <a href=/info.php>/info.php</a> or <a href=/style.css>a static file</a>.</p>\n";
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
